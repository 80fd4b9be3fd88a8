# qvirt build entry points. Everything a target needs is installed by `make deps`.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
TOOLS := $(CURDIR)/_tools
GUEST := $(CURDIR)/_guest
export PATH := $(TOOLS):$(PATH)

APT_PACKAGES := qemu-system-x86 qemu-utils busybox-static cpio e2fsprogs protobuf-compiler socat
APT_CHECK := qemu-system-x86_64 qemu-img busybox cpio mkfs.ext4 protoc socat

COMMANDS := virt-launcher

.PHONY: all deps apt tools build generate guest test test-unit bench run clean vet fmt

all: build

## deps: install missing Debian packages and the pinned Go tools.
deps: apt tools

apt:
	@missing=""; for c in $(APT_CHECK); do command -v $$c >/dev/null || missing=1; done; \
	[ -x /bin/busybox ] || missing=1; \
	if [ -n "$$missing" ]; then \
		echo ">> installing Debian packages: $(APT_PACKAGES)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_PACKAGES) >/dev/null; \
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

## build: compile every command into bin/.
build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(COMMANDS))

## generate: rebuild deepcopy, CRDs and protobuf code (committed).
generate: tools
	controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	controller-gen crd:crdVersions=v1 paths=./api/... output:crd:artifacts:config=deploy/crds
	protoc --proto_path=launcher/api --go_out=launcher/api --go_opt=paths=source_relative \
		--go-grpc_out=launcher/api --go-grpc_opt=paths=source_relative launcher/api/*.proto

## guest: build the tiny test guest (kernel, initramfs, ext4 qcow2) from Debian packages.
guest: apt
	@bash hack/guest/build.sh $(GUEST)

## run: boot the example VM and print how to reach its console.
run: apt guest build
	@bash hack/run-launcher.sh

## test: every test, with real QEMU under emulation.
test: apt guest
	QVIRT_GUEST_DIR=$(GUEST) $(GO) test -count=1 -timeout 40m ./...

test-unit:
	$(GO) test -count=1 -short ./...

## bench: measurements printed as numbers (not assertions).
bench: deps guest build
	QVIRT_GUEST_DIR=$(GUEST) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./launcher/... ./qmp/...

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN) $(GUEST) _local
