package netplumb

import "strings"

// maxOptionLen is the most one DHCP option carries. Longer data would be split over several
// instances of the option (RFC 3396), which not every client joins again, so the search list is
// kept within one.
const maxOptionLen = 255

// encodeDomainSearch is the data of option 119 (RFC 3397): each domain as RFC 1035 labels, a
// length byte before each label and a zero byte after the last, with no compression pointers
// (a server may leave them out, and every client reads the plain form). Domains that are not
// valid names are skipped, and so are those that no longer fit in one option.
func encodeDomainSearch(domains []string) []byte {
	var out []byte
	for _, d := range domains {
		enc, ok := encodeDomain(d)
		if !ok || len(out)+len(enc) > maxOptionLen {
			continue
		}
		out = append(out, enc...)
	}
	return out
}

// encodeDomain is d as RFC 1035 labels, if d is a valid name: labels of 1 to 63 bytes, 255 bytes
// in all once encoded.
func encodeDomain(d string) ([]byte, bool) {
	d = strings.TrimSuffix(d, ".")
	if d == "" {
		return nil, false
	}
	var enc []byte
	for _, label := range strings.Split(d, ".") {
		if len(label) == 0 || len(label) > 63 {
			return nil, false
		}
		enc = append(enc, byte(len(label)))
		enc = append(enc, label...)
	}
	enc = append(enc, 0)
	return enc, len(enc) <= maxOptionLen
}

// validDomainName tells whether d may go in option 15 (a domain name, RFC 2132 3.17).
func validDomainName(d string) bool {
	_, ok := encodeDomain(d)
	return ok && len(d) <= 253
}
