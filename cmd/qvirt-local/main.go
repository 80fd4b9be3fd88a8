// qvirt-local runs qvirt's whole stack on this machine: `run` in the foreground (Ctrl-C tears it
// down), `down` stops one started in the background and cleans up after it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/qvirt/qvirt/internal/localcluster"
)

func main() {
	klog.InitFlags(nil)
	root := flag.String("root", ".", "repository root")
	readyFile := flag.String("ready-file", "", "file written once the cluster and the example VM are ready")
	example := flag.String("example", "deploy/examples/vm-tiny.yaml", "VM applied once the cluster is up; empty for none")
	nodeCount := flag.Int("nodes", 2, "number of nodes (node01, node02, ...)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: qvirt-local [flags] run|down\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		fatal(err)
	}
	if *nodeCount < 1 || *nodeCount > 99 {
		fatal(fmt.Errorf("--nodes %d: between 1 and 99", *nodeCount))
	}
	opts := localcluster.Options{Root: absRoot, Progress: os.Stdout, Log: klog.Background().WithName("qvirt-local")}
	for i := 1; i <= *nodeCount; i++ {
		opts.Nodes = append(opts.Nodes, fmt.Sprintf("node%02d", i))
	}
	switch flag.Arg(0) {
	case "run":
		if err := run(opts, *example, *readyFile); err != nil {
			fatal(err)
		}
	case "down":
		if err := down(opts); err != nil {
			fatal(err)
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "qvirt-local: %v\n", err)
	klog.Flush()
	os.Exit(1)
}

func pidFile(o localcluster.Options) string {
	return filepath.Join(o.Root, "_local", "qvirt-local.pid")
}

func run(o localcluster.Options, example, readyFile string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(filepath.Join(o.Root, "_local"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(pidFile(o), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	defer os.Remove(pidFile(o))
	if readyFile != "" {
		os.Remove(readyFile)
	}
	upCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	c, err := localcluster.Up(upCtx, o)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Down(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "qvirt-local: teardown: %v\n", err)
		}
	}()
	vm := ""
	if example != "" {
		if vm, err = c.ApplyAndWait(ctx, filepath.Join(o.Root, example), 5*time.Minute); err != nil {
			return err
		}
	}
	printHowTo(c, vm)
	if readyFile != "" {
		if err := os.WriteFile(readyFile, []byte("ready\n"), 0o644); err != nil {
			return err
		}
	}
	<-ctx.Done()
	fmt.Println(">> stopping (deleting VMs, stopping components)")
	return nil
}

func printHowTo(c *localcluster.Cluster, vm string) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nqvirt is running: Kubernetes %s on nodes %s (kubelet, containerd), with virt-api, virt-controller and virt-handler as pods.\n",
		"v1.37.2", strings.Join(c.NodeNames(), ", "))
	if vm != "" {
		fmt.Fprintf(&b, "The example VM %q is Running.\n", vm)
	}
	fmt.Fprintf(&b, "\nexport KUBECONFIG=%s\n", c.Kubeconfig())
	fmt.Fprintf(&b, "kubectl get vms,vmis,pods -o wide\n")
	if vm != "" {
		fmt.Fprintf(&b, "bin/virtctl console %s        # Ctrl+] to leave\n", vm)
		fmt.Fprintf(&b, "bin/virtctl vnc --proxy-only %s\n", vm)
		fmt.Fprintf(&b, "bin/virtctl port-forward vm/%s 8080:80   # then: curl http://127.0.0.1:8080/\n", vm)
		fmt.Fprintf(&b, "bin/virtctl pause vm %s; bin/virtctl unpause vm %s; bin/virtctl stop %s\n", vm, vm, vm)
	}
	fmt.Fprintf(&b, "kubectl logs -n kubevirt daemonset/virt-handler   # and any launcher pod: kubectl logs virt-launcher-%s-...\n", vm)
	fmt.Fprintf(&b, "bin/qvirt-image push --registry %s localhost:5000/me/disk:1 /disk/disk.qcow2=FILE   # your own containerDisk\n", c.RegistryAddr())
	fmt.Fprintf(&b, "\nLogs: %s (control plane, registries) and %s/<node>/logs (kubelet, containerd). Ctrl-C stops everything.\n", c.LogDir(), c.NodesDir())
	fmt.Print(b.String())
}

// down stops a cluster started by `run` in the background, then sweeps what may remain.
func down(o localcluster.Options) error {
	if b, err := os.ReadFile(pidFile(o)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && syscall.Kill(pid, 0) == nil {
			fmt.Printf(">> stopping qvirt-local (pid %d)\n", pid)
			_ = syscall.Kill(pid, syscall.SIGTERM)
			for deadline := time.Now().Add(4 * time.Minute); time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil; {
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	return localcluster.Sweep(filepath.Join(o.Root, "_local"), filepath.Join(o.Root, "_tools"), 0)
}
