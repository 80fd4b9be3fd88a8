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
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/qvirt/qvirt/e2e/testenv"
	"github.com/qvirt/qvirt/internal/localcluster"
)

// TestPrometheusScrapesNodeAgents runs a real Prometheus against the node agents and reads the
// VM's kubevirt_vmi_* series back through its HTTP query API.
func TestPrometheusScrapesNodeAgents(t *testing.T) {
	c := localStack(t)
	prom := startPrometheus(t, c)
	startVM(t, c, vmManifest("scraped", e2eNodes[0], "masquerade"))

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	wanted := []string{"kubevirt_vmi_cpu_usage_seconds_total", "kubevirt_vmi_memory_resident_bytes", "kubevirt_vmi_network_receive_bytes_total", "kubevirt_vmi_storage_read_traffic_bytes_total"}
	for _, family := range wanted {
		prom.waitFor(t, ctx, fmt.Sprintf(`%s{name="scraped",namespace="default",node=%q}`, family, e2eNodes[0]))
	}
}

// prometheus is a real Prometheus, configured as deploy/monitoring/ tells a user to: it
// discovers virt-api, virt-controller and virt-handler pods through the Kubernetes API and
// evaluates KubeVirt's rules.
type prometheus struct {
	addr, dir string
}

// startPrometheus runs Prometheus (built by `make monitoring-tools`) until the test ends, with
// deploy/monitoring/prometheus.yaml as it ships except for what running outside the cluster
// needs (the kubeconfig to discover pods with) and a one-second scrape and evaluation interval.
func startPrometheus(t *testing.T, c *localcluster.Cluster) *prometheus {
	t.Helper()
	root := testenv.RepoRoot(t)
	bin := filepath.Join(root, "_tools", "prometheus")
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("_tools/prometheus missing: make test builds it")
		}
		t.Skip("_tools/prometheus not built (make monitoring-tools)")
	}
	dir := t.TempDir()
	shipped, err := os.ReadFile(filepath.Join(root, "deploy", "monitoring", "prometheus.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(shipped, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["global"] = map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
	cfg["rule_files"] = []any{filepath.Join(root, "deploy", "monitoring", "kubevirt-rules.yaml")}
	for _, sc := range cfg["scrape_configs"].([]any) {
		for _, sd := range sc.(map[string]any)["kubernetes_sd_configs"].([]any) {
			sd.(map[string]any)["kubeconfig_file"] = c.Kubeconfig()
		}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := freeLoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	p := &prometheus{addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+p.addr, "--log.level=warn")
	logf, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	})
	return p
}

// waitFor waits until the instant query q matches a series, and returns how many it matched.
func (p *prometheus) waitFor(t *testing.T, ctx context.Context, q string) int {
	t.Helper()
	for {
		n, err := promQuery(ctx, p.addr, q)
		if err == nil && n > 0 {
			return n
		}
		if ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(p.dir, "prometheus.log"))
			t.Fatalf("Prometheus has no %s: %v\n%s", q, err, log)
		}
		time.Sleep(500 * time.Millisecond)
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

// documentedFamilies are the families docs/metrics.md lists, with the series name a query
// finds each by (a histogram's _count).
func documentedFamilies(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	families := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`kubevirt_") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		families[name] = name
		if strings.TrimSpace(cells[2]) == "histogram" {
			families[name] = name + "_count"
		}
	}
	if len(families) == 0 {
		t.Fatal("docs/metrics.md lists no family")
	}
	return families
}

// requireEveryDocumentedFamily fails for each family of docs/metrics.md that Prometheus never
// scraped since it started.
func (p *prometheus) requireEveryDocumentedFamily(t *testing.T, ctx context.Context) {
	t.Helper()
	var missing []string
	for family, series := range documentedFamilies(t) {
		n, err := promQuery(ctx, p.addr, fmt.Sprintf(`count(last_over_time({__name__=%q}[1h]))`, series))
		if err != nil || n == 0 {
			missing = append(missing, family)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("families of docs/metrics.md Prometheus never scraped: %s", strings.Join(missing, ", "))
	}
}
