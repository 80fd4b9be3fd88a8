package handler

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strconv"

	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/control/config"
	"github.com/qvirt/qvirt/launcher/qemuargs"
)

// Ports of status.migrationState.targetDirectMigrationNodePorts: each listening port of the
// target node agent maps to the stream it carries, numbered as KubeVirt's (0: the VM's state,
// 49153: its local disks).
const (
	streamState = 0
	streamDisks = 49153
)

// MigrationOptions let a node agent carry migrations between its node and others.
type MigrationOptions struct {
	// AdvertiseHost is the address other nodes' agents reach this one at.
	AdvertiseHost string
	// Certificate is this node's certificate (its name is the node's, signed by the node CA);
	// it serves the incoming streams and authenticates the outgoing ones.
	Certificate func() (*tls.Certificate, error)
	// NodeCAs verify the other node's certificate.
	NodeCAs func() (*x509.CertPool, error)
	// Settings are the KubeVirt CR's migration settings, read as each migration starts.
	Settings func() config.Migrations
}

// serverTLS is the config of a target's listeners: the source must show a node certificate.
func (m *MigrationOptions) serverTLS() (*tls.Config, error) {
	pool, err := m.NodeCAs()
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return m.Certificate() }}, nil
}

// clientTLS is the config of a source's streams.
func (m *MigrationOptions) clientTLS() (*tls.Config, error) {
	pool, err := m.NodeCAs()
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return m.Certificate() }}, nil
}

// migrationLink is one migration's streams at this node: the listeners of a target, or the
// sockets and started move of a source.
type migrationLink struct {
	uid     types.UID
	proxies []io.Closer
	// ports maps a target's listening port to its stream (targetDirectMigrationNodePorts).
	ports map[string]int
	// started is set once the source launcher was asked to migrate.
	started bool
}

func (l *migrationLink) close() {
	for _, p := range l.proxies {
		_ = p.Close()
	}
	l.proxies = nil
}

// link returns the VM's link of migration uid, if it has one.
func (st *vmState) link(uid types.UID) *migrationLink {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.mig != nil && st.mig.uid == uid {
		return st.mig
	}
	return nil
}

// setLink replaces the VM's migration link, closing the one before.
func (st *vmState) setLink(l *migrationLink) {
	st.mu.Lock()
	old := st.mig
	st.mig = l
	st.mu.Unlock()
	if old != nil && old != l {
		old.close()
	}
}

// dropLink closes the VM's migration link.
func (st *vmState) dropLink() { st.setLink(nil) }

// activeMigration is the VMI's migration that has neither completed nor failed.
func activeMigration(vmi *v1.VirtualMachineInstance) *v1.VirtualMachineInstanceMigrationState {
	ms := vmi.Status.MigrationState
	if ms == nil || ms.MigrationUID == "" || ms.Completed || ms.Failed {
		return nil
	}
	return ms
}

// streamSockets are the unix sockets, in the VM directory, of each stream: where a target's
// QEMU listens, or where a source's node agent listens for its QEMU.
var streamSockets = map[int][2]string{
	streamState: {qemuargs.MigrationSocketName, qemuargs.MigrationOutSocketName},
	streamDisks: {qemuargs.MigrationDisksSocketName, qemuargs.MigrationOutDisksSocketName},
}

// targetPort finds the target's port carrying stream.
func targetPort(ms *v1.VirtualMachineInstanceMigrationState, stream int) (string, error) {
	for port, s := range ms.TargetDirectMigrationNodePorts {
		if s == stream {
			if _, err := strconv.Atoi(port); err != nil {
				return "", errors.New("targetDirectMigrationNodePorts: " + strconv.Quote(port) + " is not a port")
			}
			return net.JoinHostPort(ms.TargetNodeAddress, port), nil
		}
	}
	return "", errors.New("targetDirectMigrationNodePorts: no port for stream " + strconv.Itoa(stream))
}
