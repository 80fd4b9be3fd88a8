package ociimages

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Package is a Debian package whose installed files go into an image.
type Package struct {
	Name string
	// Optional packages that are not installed are left out; a missing required one is an error.
	Optional bool
}

// docDirs hold documentation only, which no program in the images reads.
var docDirs = []string{"/usr/share/doc/", "/usr/share/man/", "/usr/share/info/", "/usr/share/lintian/"}

// packageFiles lists the files and symlinks (not directories) the installed package put under
// one of the prefixes, documentation left out.
func packageFiles(pkg Package, prefixes ...string) ([]string, error) {
	out, err := exec.Command("dpkg-query", "-L", pkg.Name).Output()
	if err != nil {
		if pkg.Optional {
			return nil, nil
		}
		return nil, fmt.Errorf("list the files of Debian package %s (is it installed?): %w", pkg.Name, err)
	}
	var files []string
	for _, p := range strings.Split(string(out), "\n") {
		if p == "" || !hasPrefix(p, prefixes) || hasPrefix(p, docDirs) {
			continue
		}
		st, err := os.Lstat(p)
		if err != nil {
			// dpkg lists files that a local admin may have removed, and diverted ones.
			continue
		}
		if st.IsDir() {
			continue
		}
		files = append(files, p)
	}
	return files, nil
}

func hasPrefix(p string, prefixes []string) bool {
	for _, pre := range prefixes {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	return false
}
