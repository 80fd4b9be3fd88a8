// Package version reports what a qvirt binary was built from. The version is a KubeVirt
// compatible semver: virtctl compares major.minor with its own, so qvirt reports the KubeVirt
// API level it implements, with its own release as build metadata.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X at release builds.
var (
	GitVersion = "v1.9.0+qvirt.0.1.0"
	GitCommit  = ""
	BuildDate  = ""
)

// Info is the shape of KubeVirt's version endpoint.
type Info struct {
	GitVersion   string `json:"gitVersion"`
	GitCommit    string `json:"gitCommit"`
	GitTreeState string `json:"gitTreeState"`
	BuildDate    string `json:"buildDate"`
	GoVersion    string `json:"goVersion"`
	Compiler     string `json:"compiler"`
	Platform     string `json:"platform"`
}

// Get returns the running binary's version, filling the commit from the build info when
// the linker did not set it.
func Get() Info {
	commit, state := GitCommit, "clean"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if commit == "" {
					commit = s.Value
				}
			case "vcs.modified":
				if s.Value == "true" {
					state = "dirty"
				}
			}
		}
	}
	return Info{
		GitVersion: GitVersion, GitCommit: commit, GitTreeState: state, BuildDate: BuildDate,
		GoVersion: runtime.Version(), Compiler: runtime.Compiler,
		Platform: fmt.Sprintf("%s/%s", runtime.GOOS, runtime.GOARCH),
	}
}
