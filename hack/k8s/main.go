// Command k8s is a multi-call binary holding the Kubernetes parts that tests and local mode run:
// kube-apiserver, kube-scheduler, kube-controller-manager, kubectl, and each node's kubelet and
// kube-proxy. It dispatches on the name it was started under (symlinks made by `make k8s`), or on
// its first argument (`k8s kubectl get ns`).
// One binary shares the compile and link work of the large common dependency tree.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // CronJob time zones

	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var commands = map[string]func() int{
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubectl":                 kubectl,
	"kubelet":                 func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kube-proxy":              func() int { return cli.Run(proxy.NewProxyCommand()) },
}

// kubectl mirrors k8s.io/kubernetes/cmd/kubectl: verbosity is set before the command is built so that
// plugin and kuberc handling can log.
func kubectl() int {
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) //nolint:errcheck
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}

func main() {
	name := filepath.Base(os.Args[0])
	run, ok := commands[name]
	if !ok && len(os.Args) > 1 {
		if run, ok = commands[os.Args[1]]; ok {
			os.Args = os.Args[1:]
		}
	}
	if !ok {
		names := make([]string, 0, len(commands))
		for n := range commands {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: run as one of %v (a symlink to %s), or %s <command> [args]\n", names, name, name)
		os.Exit(2)
	}
	os.Exit(run())
}
