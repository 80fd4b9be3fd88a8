# qvirt build entry points. Everything a target needs is installed by `make deps`.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
TOOLS := $(CURDIR)/_tools
GUEST := $(CURDIR)/_guest
export PATH := $(TOOLS):$(PATH)

APT_PACKAGES := qemu-system-x86 qemu-utils busybox-static cpio e2fsprogs protobuf-compiler socat openssh-client
APT_CHECK := qemu-system-x86_64 qemu-img busybox cpio mkfs.ext4 protoc socat ssh scp

COMMANDS := virt-launcher virt-operator virt-api virt-controller virt-handler qvirt-image qvirt-local virtctl

.PHONY: all deps apt cni tools monitoring-tools k8s nodes node-apt storage-tools build generate guest test test-unit bench run up down launcher-run clean vet fmt

all: build

## deps: install missing Debian packages and the pinned Go tools.
deps: apt cni tools

apt:
	@missing=""; for c in $(APT_CHECK); do command -v $$c >/dev/null || missing=1; done; \
	[ -x /bin/busybox ] || missing=1; \
	if [ -n "$$missing" ]; then \
		echo ">> installing Debian packages: $(APT_PACKAGES)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_PACKAGES) >/dev/null; \
	fi

## cni: the CNI plugins the local cluster's containerd attaches pods with (bridge, host-local, portmap),
## from Debian's containernetworking-plugins, in /usr/lib/cni.
CNI_DIR := /usr/lib/cni
cni:
	@if [ ! -x $(CNI_DIR)/bridge ] || [ ! -x $(CNI_DIR)/host-local ] || [ ! -x $(CNI_DIR)/loopback ]; then \
		echo ">> installing Debian package containernetworking-plugins"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends containernetworking-plugins >/dev/null; \
	fi

tools: $(TOOLS)/controller-gen $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc

$(TOOLS)/%: hack/tools/go.mod hack/tools/go.sum
	@mkdir -p $(TOOLS)
	@echo ">> building tool $*"
	@cd hack/tools && case $* in \
		controller-gen) GOBIN=$(TOOLS) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen ;; \
		protoc-gen-go) GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go ;; \
		protoc-gen-go-grpc) GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc ;; \
	esac

## monitoring-tools: Prometheus and promtool into _tools/ from the Go module proxy, with the
## Kubernetes service discovery that deploy/monitoring/prometheus.yaml uses (Debian's package is
## built without it) and no other.
PROMETHEUS_VERSION := v0.316.0
PROMETHEUS_STAMP := $(TOOLS)/.prometheus-$(PROMETHEUS_VERSION)
monitoring-tools: $(PROMETHEUS_STAMP)

$(PROMETHEUS_STAMP):
	@mkdir -p $(TOOLS)
	@echo ">> building Prometheus and promtool $(PROMETHEUS_VERSION), ~3 min the first time"
	@start=$$(date +%s); GOBIN=$(TOOLS) $(GO) install -ldflags '-s -w' -tags remove_all_sd,enable_kubernetes_sd \
		github.com/prometheus/prometheus/cmd/prometheus@$(PROMETHEUS_VERSION) \
		github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_VERSION) && touch $@ && \
		echo ">> built Prometheus in $$(( $$(date +%s) - start )) s"

## k8s: build the real control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager,
## kubectl) into _tools/k8s/ from the Go module proxy; rebuilt only when hack/k8s changes.
K8S := $(TOOLS)/k8s
K8S_VERSION := v1.37.2
K8S_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/component-base/version.gitTreeState=clean
K8S_LINKS := kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet kube-proxy

k8s: $(K8S)/k8s $(K8S)/etcd
	@for n in $(K8S_LINKS); do ln -sfn k8s $(K8S)/$$n; done

$(K8S)/k8s: hack/k8s/go.mod hack/k8s/go.sum $(wildcard hack/k8s/*.go)
	@mkdir -p $(K8S)
	@echo ">> building the Kubernetes control plane $(K8S_VERSION), ~8 min the first time"
	@start=$$(date +%s); cd hack/k8s && $(GO) build -ldflags '$(K8S_LDFLAGS)' -o $@.tmp . && mv $@.tmp $@ && \
		echo ">> built $@ in $$(( $$(date +%s) - start )) s"

$(K8S)/etcd: hack/k8s/etcd/go.mod hack/k8s/etcd/go.sum $(wildcard hack/k8s/etcd/*.go)
	@mkdir -p $(K8S)
	@echo ">> building etcd, ~1 min the first time"
	@cd hack/k8s/etcd && $(GO) build -ldflags '-s -w' -o $@.tmp . && mv $@.tmp $@

## nodes: what each local node runs beside the kubelet (containerd v2 with its runc shim and ctr;
## Debian's runc, iptables and CNI plugins) and the OCI registry the nodes pull from, into
## _tools/node/ from the Go module proxy; rebuilt only when hack/containerd or hack/registry change.
NODE_TOOLS := $(TOOLS)/node
CONTAINERD_CMDS := containerd containerd-shim-runc-v2 ctr
nodes: node-apt $(addprefix $(NODE_TOOLS)/,$(CONTAINERD_CMDS)) $(NODE_TOOLS)/registry storage-tools

node-apt:
	@if ! command -v runc >/dev/null || ! command -v iptables >/dev/null || ! command -v nsenter >/dev/null; then \
		echo ">> installing Debian packages runc iptables util-linux"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runc iptables util-linux >/dev/null; \
	fi

$(NODE_TOOLS)/containerd $(NODE_TOOLS)/containerd-shim-runc-v2 $(NODE_TOOLS)/ctr &: hack/containerd/go.mod hack/containerd/go.sum
	@mkdir -p $(NODE_TOOLS)
	@echo ">> building containerd v2 (containerd, containerd-shim-runc-v2, ctr), ~5 min the first time"
	@start=$$(date +%s); cd hack/containerd && for c in $(CONTAINERD_CMDS); do \
		CGO_ENABLED=0 $(GO) build -tags no_btrfs -ldflags '-s -w' -o $(NODE_TOOLS)/$$c.tmp github.com/containerd/containerd/v2/cmd/$$c && \
		mv $(NODE_TOOLS)/$$c.tmp $(NODE_TOOLS)/$$c || exit 1; done; \
		echo ">> built containerd in $$(( $$(date +%s) - start )) s"

$(NODE_TOOLS)/registry: hack/registry/go.mod hack/registry/go.sum
	@mkdir -p $(NODE_TOOLS)
	@echo ">> building the OCI registry (distribution v3)"
	@cd hack/registry && CGO_ENABLED=0 $(GO) build -ldflags '-s -w' -o $@.tmp github.com/distribution/distribution/v3/cmd/registry && mv $@.tmp $@

## storage-tools: the local cluster's storage provisioner (deploy/storage/), rancher's
## local-path-provisioner, into _tools/node/ from the Go module proxy; the local cluster packages
## it as an image. Not part of qvirt: users bring their own provisioner.
LOCAL_PATH_VERSION := v0.0.30
LOCAL_PATH_STAMP := $(NODE_TOOLS)/.local-path-provisioner-$(LOCAL_PATH_VERSION)
storage-tools: $(LOCAL_PATH_STAMP)

$(LOCAL_PATH_STAMP):
	@mkdir -p $(NODE_TOOLS)
	@echo ">> building local-path-provisioner $(LOCAL_PATH_VERSION), ~2 min the first time"
	@start=$$(date +%s); GOBIN=$(NODE_TOOLS) GOFLAGS=-mod=mod CGO_ENABLED=0 $(GO) install -ldflags '-s -w -X main.VERSION=$(LOCAL_PATH_VERSION)' \
		github.com/rancher/local-path-provisioner@$(LOCAL_PATH_VERSION) && touch $@ && \
		echo ">> built local-path-provisioner in $$(( $$(date +%s) - start )) s"

## build: compile every command into bin/, and the pause image's static binary.
build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(COMMANDS))
	CGO_ENABLED=0 $(GO) build -ldflags '-s -w' -o $(BIN)/qvirt-pause ./hack/pause

## generate: rebuild deepcopy, CRDs, protobuf code, the PrometheusRule and docs/metrics.md (committed).
generate: tools
	controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	controller-gen crd:crdVersions=v1 paths=./api/... output:crd:artifacts:config=deploy/crds
	protoc --proto_path=launcher/api --go_out=launcher/api --go_opt=paths=source_relative \
		--go-grpc_out=launcher/api --go-grpc_opt=paths=source_relative launcher/api/*.proto
	$(GO) test -count=1 -run '^TestPrometheusRuleWrapsTheRules$$' ./deploy/monitoring/ -args -update
	$(GO) test -count=1 -run '^TestMetricsDocMatchesTheCollectors$$' ./internal/metricsdoc/ -args -update
	$(GO) test -count=1 -run '^TestOperatorManifestIsAssembled$$' ./deploy/ -args -update

## guest: build the tiny test guest (kernel, initramfs, ext4 qcow2) from Debian packages; the local
## cluster pushes it as the images localhost:5000/qvirt/tiny-kernel and localhost:5000/qvirt/tiny-disk.
guest: apt
	@bash hack/guest/build.sh $(GUEST)

## run: the whole stack on this machine (a real control plane, virt-api, virt-controller, two
## nodes), boot the example VM and say how to reach it; Ctrl-C tears it all down.
run: apt cni guest k8s nodes build
	@bin/qvirt-local --root $(CURDIR) run

## up / down: the same in the background, for scripts; up returns once the example VM runs.
up: apt cni guest k8s nodes build
	@mkdir -p _local && rm -f _local/ready
	@nohup bin/qvirt-local --root $(CURDIR) --ready-file _local/ready run >_local/qvirt-local.log 2>&1 &
	@for i in $$(seq 1 600); do 		if [ -f _local/ready ]; then grep -A20 '^qvirt is running' _local/qvirt-local.log; exit 0; fi; 		if ! pgrep -f "qvirt-local --root $(CURDIR) --ready-file" >/dev/null; then tail -20 _local/qvirt-local.log; exit 1; fi; 		sleep 1; 	done; echo "timed out; see _local/qvirt-local.log"; exit 1

down:
	@[ -x bin/qvirt-local ] || $(GO) build -o $(BIN)/ ./cmd/qvirt-local
	@bin/qvirt-local --root $(CURDIR) down

## launcher-run: one VM under a standalone virt-launcher, no cluster (debugging the runtime).
launcher-run: apt guest build
	@bash hack/run-launcher.sh

## test: every test, with real QEMU under emulation. The end-to-end suite runs on its own
## afterwards: its guests share 2 cores with nothing else then.
test: apt cni guest k8s nodes monitoring-tools build
	QVIRT_GUEST_DIR=$(GUEST) $(GO) test -count=1 -timeout 40m $$($(GO) list ./... | grep -v '/e2e$$')
	$(MAKE) --no-print-directory fuzz
	QVIRT_GUEST_DIR=$(GUEST) $(GO) test -count=1 -timeout 40m ./e2e/...

## fuzz: a short run of the fuzz targets of what parses guest input (the DHCP server's packets).
## The budget is a count of executions, not a duration: Go's fuzz coordinator can report its own
## -fuzztime deadline as a failure on a loaded machine (golang/go#75804).
.PHONY: fuzz
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDHCPHandlePacket$$' -fuzztime 150000x ./netplumb/

## test-unit: the tests that need no root, QEMU, guest or control plane (-short skips those).
test-unit:
	$(GO) test -count=1 -short ./...

## bench: measurements printed as numbers (not assertions): launcher RSS and start latency, QMP
## round trip, live migration time and downtime, webhook latency, controller scale, VMI start
## burst and per-VM overhead.
bench: deps guest k8s nodes monitoring-tools build
	QVIRT_GUEST_DIR=$(GUEST) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./launcher/... ./qmp/... ./control/virtapi/ ./node/metrics/ ./e2e/...

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN) $(GUEST) _local
