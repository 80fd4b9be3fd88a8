// Package nodes runs the local cluster's nodes: each one a real kubelet with its own containerd
// and kube-proxy, in a network namespace of its own joined to the host by a bridge, and in a mount
// namespace of its own, so that what kubelets assume they own alone (/var/lib/kubelet with its
// device-plugin directory, /var/log/pods, /run) is private to each node while containers see the
// host's files everywhere else.
//
// Nothing here is product code: control/ and node/ never import it.
package nodes
