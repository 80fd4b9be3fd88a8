// Command etcd is etcd v3.6, built on its own: k8s.io/kubernetes requires etcd v3.7 modules, so etcd
// v3.6 cannot share a module (and a binary) with the rest of the control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
