package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestPrometheusScrapesNodeAgents runs a real Prometheus (Debian's) against the node agents and
// reads the VM's kubevirt_vmi_* series back through its HTTP query API.
func TestPrometheusScrapesNodeAgents(t *testing.T) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("prometheus missing: make test installs it")
		}
		t.Skip("prometheus not installed (make deps installs Debian's)")
	}
	c := localStack(t)
	startVM(t, c, vmManifest("scraped", e2eNodes[0], "masquerade"))

	dir := t.TempDir()
	// One job per node: Prometheus checks each agent's certificate against the node CA with
	// that node's name as the server name.
	cfg := "global: {scrape_interval: 2s}\nscrape_configs:\n"
	for i, node := range e2eNodes {
		ep := handlerMetrics(t, c, node)
		caFile := filepath.Join(dir, "node-ca.crt")
		if err := os.WriteFile(caFile, ep.CA, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf("- job_name: virt-handler-%d\n  scheme: https\n  tls_config: {ca_file: %q, server_name: %q}\n  static_configs:\n  - targets: [%q]\n", i, caFile, node, ep.Addr)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := freeLoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	logf, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	wanted := []string{"kubevirt_vmi_cpu_usage_seconds_total", "kubevirt_vmi_memory_resident_bytes", "kubevirt_vmi_network_receive_bytes_total", "kubevirt_vmi_storage_read_traffic_bytes_total"}
	for _, family := range wanted {
		q := fmt.Sprintf(`%s{name="scraped",namespace="default",node=%q}`, family, e2eNodes[0])
		for {
			n, err := promQuery(ctx, listen, q)
			if err == nil && n > 0 {
				break
			}
			if ctx.Err() != nil {
				log, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
				t.Fatalf("Prometheus has no %s: %v\n%s", q, err, log)
			}
			time.Sleep(time.Second)
		}
	}
}

// promQuery returns how many series an instant query matched.
func promQuery(ctx context.Context, addr, q string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/query?query="+url.QueryEscape(q), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string
		Data   struct{ Result []json.RawMessage }
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, fmt.Errorf("%w: %s", err, b)
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("query: %s", b)
	}
	return len(r.Data.Result), nil
}

func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
