// Package netplumb wires a VM's network inside a pod's network namespace with netlink: tap
// devices handed to QEMU as descriptors, KubeVirt's bridge and masquerade bindings, and a
// DHCP server that gives the guest its address. It knows links, addresses, routes and NAT
// rules; it knows nothing of VMs or Kubernetes.
//
// Every operation enters namespaces only through Do, which pins the OS thread, or through
// sockets created inside a namespace (netlink, nftables, DHCP), so no goroutine ever runs in a
// namespace it did not ask for.
package netplumb
