package launcherpod

import (
	"crypto/sha256"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

const namePrefix = "virt-launcher-"

// suffixAlphabet is the one Kubernetes uses for generated names: no vowels (no
// words) and no characters that are easily confused.
const suffixAlphabet = "bcdfghjklmnpqrstvwxz2456789"

const suffixLength = 5

// PodName is the launcher pod name of a VMI: virt-launcher-<vmi>-<5 chars>,
// where the suffix is derived from uid. Because it is deterministic, a
// controller that restarts between creating a pod and seeing it in its cache
// gets AlreadyExists instead of creating a second pod. For a migration target
// the uid is the migration's, so source and target pods differ.
func PodName(vmiName string, uid types.UID) string {
	prefix := namePrefix + vmiName
	if max := validation.DNS1123SubdomainMaxLength - suffixLength - 1; len(prefix) > max {
		prefix = prefix[:max]
	}
	// A cut name may end in '.' or '-', which must not precede the suffix's '-'.
	prefix = strings.TrimRight(prefix, ".-")
	return prefix + "-" + hashSuffix(string(uid))
}

func hashSuffix(s string) string {
	sum := sha256.Sum256([]byte(s))
	var b strings.Builder
	for i := range suffixLength {
		b.WriteByte(suffixAlphabet[int(sum[i])%len(suffixAlphabet)])
	}
	return b.String()
}
