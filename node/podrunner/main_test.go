package podrunner

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
)

// The test binary doubles as a fake virt-launcher: the runner starts it, with the pod's
// environment, when fakeLauncherEnv is set.
const fakeLauncherEnv = "QVIRT_FAKE_LAUNCHER"

func TestMain(m *testing.M) {
	if os.Getenv(fakeLauncherEnv) == "1" {
		os.Exit(fakeLauncher(os.Args[1:]))
	}
	code := m.Run()
	if shared.cluster != nil {
		shared.cluster.Stop()
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// fakeLauncher takes virt-launcher's flags, writes its pid to DIR/fake.pid and serves
// "hello VMI" on TCP port 8080 of the pod's namespace. It honours SIGTERM (exit 0) unless
// FAKE_IGNORE_TERM is set, starts a "QEMU" child in a process group of its own when FAKE_CHILD is
// set (pid in DIR/child.pid), and crashes with code N, leaving that child behind, once DIR/exit
// holds N.
func fakeLauncher(args []string) int {
	fs := flag.NewFlagSet("virt-launcher", flag.ContinueOnError)
	dir := fs.String("dir", "", "")
	vmi := fs.String("vmi", "", "")
	fs.Duration("stop-grace-period", 0, "")
	if err := fs.Parse(args); err != nil || *dir == "" {
		fmt.Fprintln(os.Stderr, "fake launcher: bad flags", args)
		return 2
	}
	fmt.Println("fake launcher starting for", *vmi)
	terms := make(chan os.Signal, 1)
	if os.Getenv("FAKE_IGNORE_TERM") != "" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(terms, syscall.SIGTERM)
	}
	l, err := net.Listen("tcp", ":8080")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake launcher:", err)
		return 3
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "hello %s\n", *vmi)
			c.Close()
		}
	}()
	if os.Getenv("FAKE_CHILD") != "" {
		child := exec.Command("sleep", "3600")
		child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "fake launcher:", err)
			return 3
		}
		os.WriteFile(filepath.Join(*dir, "child.pid"), []byte(strconv.Itoa(child.Process.Pid)), 0o644)
	}
	os.WriteFile(filepath.Join(*dir, "fake.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	tick := time.NewTicker(50 * time.Millisecond)
	for {
		select {
		case <-terms:
			fmt.Println("fake launcher: SIGTERM, exiting")
			return 0
		case <-tick.C:
			if b, err := os.ReadFile(filepath.Join(*dir, "exit")); err == nil {
				code, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				fmt.Println("fake launcher: crashing with", code)
				return code
			}
		}
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "needs root (network namespaces, CNI)")
	}
}

func requireCNI(t *testing.T) {
	t.Helper()
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(DefaultCNIPluginDir, p)); err != nil {
			skipOrFail(t, fmt.Sprintf("CNI plugins missing (run `make cni`): %v", err))
		}
	}
}

// skipOrFail skips, except under CI, which provides everything these tests need.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

var shared struct {
	once    sync.Once
	dir     string
	cluster *controlplane.Cluster
	err     error
}

// testCluster is one control plane for every test of the package, started on first use.
func testCluster(t *testing.T) *controlplane.Cluster {
	t.Helper()
	requireRoot(t)
	requireCNI(t)
	controlplane.RequireBinaries(t)
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "podrunner-cluster-"); shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		began := time.Now()
		shared.cluster, shared.err = controlplane.Start(ctx, controlplane.Options{Dir: shared.dir, Log: logr.Discard()})
		t.Logf("control plane started in %v", time.Since(began).Round(time.Millisecond))
	})
	if shared.err != nil {
		t.Fatalf("control plane: %v", shared.err)
	}
	return shared.cluster
}
