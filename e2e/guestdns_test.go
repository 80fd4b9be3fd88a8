package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGuestDNSAndVMNetworkCIDR: the guest's DHCP lease carries the launcher pod's resolvers and
// search list (here the VMI's dnsPolicy None with a dnsConfig, which the pod's resolv.conf
// holds), so the guest's /etc/resolv.conf names them; and with masquerade on a pod network
// with vmNetworkCIDR the guest takes that subnet's second address and is still reached through
// the pod's IP.
func TestGuestDNSAndVMNetworkCIDR(t *testing.T) {
	c := localStack(t)
	node := e2eNodes[0]
	m := vmManifest("dnsguest", node, "masquerade")
	m = strings.Replace(m, "      terminationGracePeriodSeconds:", `      dnsPolicy: None
      dnsConfig:
        nameservers: [10.96.0.53, 10.96.0.54]
        searches: [default.svc.cluster.local, example.test]
        options: [{name: ndots, value: "2"}]
      terminationGracePeriodSeconds:`, 1)
	m = strings.Replace(m, "        pod: {}", "        pod: {vmNetworkCIDR: 10.11.0.0/24}", 1)
	startVM(t, c, m)
	t.Cleanup(func() { _ = c.K8s.Kubectl("delete", "vm", "dnsguest", "--wait=false").Run() })

	vmi := getVMI(t, c, "dnsguest")
	pod := launcherPod(t, c, vmi)
	// QEMU runs in the compute container, whose root holds the resolv.conf the node agent reads.
	qemu := qemuPIDs(t, c, vmi)
	if len(qemu) != 1 {
		t.Fatalf("QEMU processes: %v", qemu)
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(qemu[0]), "root", "etc", "resolv.conf"))
	if err != nil {
		t.Fatal(err)
	}
	podConf := string(b)
	if !strings.Contains(podConf, "nameserver 10.96.0.53") || !strings.Contains(podConf, "search default.svc.cluster.local example.test") {
		t.Fatalf("the launcher pod's resolv.conf is not what its dnsConfig says:\n%s", podConf)
	}

	ws := stream(t, c, "virtualmachineinstances/dnsguest/console")
	send(t, ws, "\n")
	expect(t, ws, "qvirt# ", 60*time.Second)
	// The prompt comes before the lease: the guest's DHCP client writes resolv.conf, then
	// /run/dhcp.eth0.
	send(t, ws, "while [ ! -s /run/dhcp.eth0 ]; do sleep 1; done; tr '\\n' '|' </etc/resolv.conf; echo\n")
	expect(t, ws, "search default.svc.cluster.local example.test|nameserver 10.96.0.53|nameserver 10.96.0.54|", 30*time.Second)
	send(t, ws, "ip -4 addr show dev eth0 | grep -o 'inet [0-9./]*' | tr ' ' '='; ip route show default | tr -s ' ' '_'\n")
	out := expect(t, ws, "default_via_10.11.0.1_", 30*time.Second)
	if !strings.Contains(out, "inet=10.11.0.2/24") {
		t.Fatalf("the guest's address is not 10.11.0.2/24 on vmNetworkCIDR 10.11.0.0/24:\n%s", out)
	}
	httpFromNetns(t, c.Nodes.Node(node).NetnsPath(), "http://"+pod.Status.PodIP+":80/", "qvirt-guest")
}
