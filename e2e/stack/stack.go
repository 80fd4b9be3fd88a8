// Package stack brings up qvirt's control plane on a real kube-apiserver for tests: the local
// cluster, the CRDs, and virt-api registered as the admission webhooks and the aggregated
// subresource API, exactly as deploy/ declares them.
package stack

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/qvirt/qvirt/control/virtapi"
	"github.com/qvirt/qvirt/internal/localcluster"
	"github.com/qvirt/qvirt/internal/localcluster/controlplane"
	"github.com/qvirt/qvirt/internal/pki"
	"github.com/qvirt/qvirt/node/nodeapi/nodeapitest"
)

// Namespace is where qvirt's components and the KubeVirt CR live.
const Namespace = localcluster.Namespace

// Stack is a running control plane with virt-api.
type Stack struct {
	Cluster   *controlplane.Cluster
	Kube      kubernetes.Interface
	Root      string // repository root
	Dir       string
	CA        *pki.CA
	VirtAPI   net.Addr
	CAFile    string
	cancel    context.CancelFunc
	virtAPIEr <-chan error
}

// Options choose what runs besides the control plane.
type Options struct {
	Dir  string
	Root string
	Log  logr.Logger
	// Node is the node API test double's environment virt-api trusts; nil makes a fresh PKI
	// without a node agent.
	Node *nodeapitest.Env
}

// Start brings everything up; Stop tears it down.
func Start(ctx context.Context, o Options) (*Stack, error) {
	c, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(o.Dir, "cluster"), Log: o.Log})
	if err != nil {
		return nil, err
	}
	s := &Stack{Cluster: c, Root: o.Root, Dir: o.Dir}
	if err := s.setup(ctx, o); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Stack) setup(ctx context.Context, o Options) error {
	var err error
	if s.Kube, err = kubernetes.NewForConfig(s.Cluster.RESTConfig()); err != nil {
		return err
	}
	if out, err := s.Cluster.Kubectl("apply", "--server-side", "-f", filepath.Join(s.Root, "deploy", "crds")).CombinedOutput(); err != nil {
		return fmt.Errorf("install CRDs: %v: %s", err, out)
	}
	if out, err := s.Cluster.Kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", filepath.Join(s.Root, "deploy", "crds")).CombinedOutput(); err != nil {
		return fmt.Errorf("CRDs not established: %v: %s", err, out)
	}
	if _, err := s.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := s.startVirtAPI(ctx, o); err != nil {
		return err
	}
	return s.register(ctx)
}

// startVirtAPI issues virt-api's serving certificate (for the names the kube-apiserver checks)
// and runs it in-process on a loopback port.
func (s *Stack) startVirtAPI(ctx context.Context, o Options) error {
	pkiDir := filepath.Join(s.Dir, "qvirt-pki")
	var err error
	if s.CA, err = pki.NewCA("qvirt-ca", 7*24*time.Hour); err != nil {
		return err
	}
	s.CAFile = filepath.Join(pkiDir, "ca.crt")
	if err := pki.WriteFileAtomic(s.CAFile, s.CA.CertPEM(), 0o644); err != nil {
		return err
	}
	serving, err := s.CA.Sign(pki.Request{CommonName: "virt-api", Server: true,
		DNSNames: []string{"virt-api.kubevirt.svc", "virt-api.kubevirt.svc.cluster.local", "localhost"},
		IPs:      []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		return err
	}
	certFile, keyFile, err := serving.Write(pkiDir, "virt-api-serving")
	if err != nil {
		return err
	}
	node := o.Node
	nodeCA, nodeCert, nodeKey := s.CAFile, "", ""
	if node != nil {
		nodeCA, nodeCert, nodeKey = node.CAFile, node.ClientCertFile, node.ClientKeyFile
	} else {
		kp, err := s.CA.Sign(pki.Request{CommonName: "virt-api", Client: true})
		if err != nil {
			return err
		}
		if nodeCert, nodeKey, err = kp.Write(pkiDir, "virt-api-node-client"); err != nil {
			return err
		}
	}
	vctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	addr, errc, err := virtapi.Start(vctx, virtapi.Options{
		REST: s.Cluster.RESTConfig(), Namespace: Namespace, Listen: "127.0.0.1:0",
		TLSCertFile: certFile, TLSKeyFile: keyFile,
		RequestHeaderCAFile: s.Cluster.FrontProxyCA(), RequestHeaderAllowedNames: []string{"front-proxy-client"},
		NodeCAFile: nodeCA, NodeClientCertFile: nodeCert, NodeClientKeyFile: nodeKey,
		Log: o.Log.WithName("virt-api"),
	})
	if err != nil {
		return err
	}
	s.VirtAPI, s.virtAPIEr = addr, errc
	return nil
}

// register installs the virt-api Service, webhooks and APIService as local mode does.
func (s *Stack) register(ctx context.Context) error {
	return RegisterVirtAPI(ctx, s.Cluster.RESTConfig(), filepath.Join(s.Root, "deploy"), s.VirtAPI.(*net.TCPAddr).Port, s.CA.CertPEM())
}

// Stop ends virt-api and the cluster.
func (s *Stack) Stop() {
	if s.cancel != nil {
		s.cancel()
		select {
		case <-s.virtAPIEr:
		case <-time.After(15 * time.Second):
		}
	}
	_ = s.Cluster.Stop()
}
