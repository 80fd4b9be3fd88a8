package localmode

import (
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/qvirt/qvirt/internal/proc"
)

func (c *Cluster) start(name, binary string, args ...string) error {
	comp := &component{name: name, binary: filepath.Join(c.opts.BinDir, binary), args: args}
	c.mu.Lock()
	c.procs[name] = comp
	c.mu.Unlock()
	return c.launch(comp)
}

func (c *Cluster) launch(comp *component) error {
	p, err := proc.StartProcess(c.spawner, comp.name, comp.binary, filepath.Join(c.LogDir(), comp.name+".log"), comp.args)
	if err != nil {
		return err
	}
	c.mu.Lock()
	comp.p = p
	c.mu.Unlock()
	return nil
}

func (c *Cluster) startVirtAPI(ids *identities) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	c.VirtAPIPort = port
	for i := 0; i < c.opts.VirtAPIReplicas; i++ {
		if err := c.start(fmt.Sprintf("virt-api-%d", i), "virt-api",
			"--kubeconfig", ids.kubeconfig["virt-api"], "--namespace", Namespace,
			"--listen", "127.0.0.1:"+strconv.Itoa(port), "--reuse-port",
			"--tls-cert-file", ids.apiCert, "--tls-key-file", ids.apiKey,
			"--requestheader-client-ca-file", c.K8s.FrontProxyCA(), "--requestheader-allowed-names", "front-proxy-client",
			"--node-ca-file", ids.caFile, "--node-client-cert-file", ids.nodeClientCert, "--node-client-key-file", ids.nodeClientKey,
			"--node-server-name", handlerServerName); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startControllers(ids *identities) error {
	for i := 0; i < c.opts.ControllerReplicas; i++ {
		metrics, err := freePort()
		if err != nil {
			return err
		}
		health, err := freePort()
		if err != nil {
			return err
		}
		if err := c.start(fmt.Sprintf("virt-controller-%d", i), "virt-controller",
			"--kubeconfig", ids.kubeconfig["virt-controller"], "--namespace", Namespace, "--leader-elect=true",
			"--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(metrics),
			"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(health),
			"--vm-dir-root", c.VMDirRoot(),
			// The pod runner of local mode serves no image volumes.
			"--image-containers=true"); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startHandlers(ids *identities) error {
	for i, n := range c.opts.Nodes {
		api, err := freePort()
		if err != nil {
			return err
		}
		metrics, err := freePort()
		if err != nil {
			return err
		}
		c.HandlerMetrics[n] = "127.0.0.1:" + strconv.Itoa(metrics)
		if err := c.start("virt-handler-"+n, "virt-handler",
			"--kubeconfig", ids.kubeconfig["virt-handler"], "--node-name", n, "--namespace", Namespace,
			"--vm-dir-root", c.VMDirRoot(),
			"--listen", "127.0.0.1:"+strconv.Itoa(api), "--advertise-host", "127.0.0.1",
			"--tls-cert-file", ids.handlerCert[n], "--tls-key-file", ids.handlerKey[n], "--client-ca-file", ids.caFile,
			"--metrics-listen", c.HandlerMetrics[n], "--stats-interval", "5s",
			"--image-store", filepath.Join(c.opts.GuestDir, "images"),
			"--local-pods", "--local-pods-kubeconfig", ids.kubeconfig["node/"+n],
			"--launcher-binary", filepath.Join(c.opts.BinDir, "virt-launcher"),
			"--pod-subnet", fmt.Sprintf("10.244.%d.0/24", i+1),
			"--state-dir", filepath.Join(c.opts.Dir, "nodes", n)); err != nil {
			return err
		}
	}
	return nil
}

// componentsAlive reports the first component that exited on its own.
func (c *Cluster) componentsAlive() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, comp := range c.procs {
		if comp.p != nil && !comp.p.Running() {
			return comp.p.ExitError()
		}
	}
	return nil
}

// Kill ends a component with SIGKILL, as a crash would.
func (c *Cluster) Kill(name string) error {
	c.mu.Lock()
	comp := c.procs[name]
	c.mu.Unlock()
	if comp == nil || comp.p == nil {
		return fmt.Errorf("no component %s", name)
	}
	if err := comp.p.Kill(); err != nil {
		return err
	}
	select {
	case <-comp.p.Exited():
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s did not exit after SIGKILL", name)
	}
}

// Restart starts a stopped or killed component again with the same arguments.
func (c *Cluster) Restart(name string) error {
	c.mu.Lock()
	comp := c.procs[name]
	c.mu.Unlock()
	if comp == nil {
		return fmt.Errorf("no component %s", name)
	}
	if comp.p != nil && comp.p.Running() {
		return fmt.Errorf("%s is still running", name)
	}
	return c.launch(comp)
}
