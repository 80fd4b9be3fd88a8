package ociimages

import (
	"strings"
	"testing"
)

// TestLocalPathHelperRunsTheVolumeScripts runs what deploy/storage's setup and teardown scripts do
// in the unpacked helper image.
func TestLocalPathHelperRunsTheVolumeScripts(t *testing.T) {
	requireRoot(t)
	img, err := LocalPathHelper()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	extract(t, img, root)
	script := `set -eu
VOL_DIR=/tmp/pv/vol
mkdir -m 0777 -p "$VOL_DIR"
test "$(stat -c %a "$VOL_DIR")" = 777
echo data > "$VOL_DIR/f"
rm -rf "$VOL_DIR"
test ! -e "$VOL_DIR"
echo scripts-ok`
	out, err := inChroot(t, root, "", "/bin/sh", "-c", script)
	if err != nil || !strings.Contains(out, "scripts-ok") {
		t.Fatalf("volume scripts in the helper image: %v: %s", err, out)
	}
}
