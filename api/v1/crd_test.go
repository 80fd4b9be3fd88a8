/*
Copyright The qvirt Authors.
Licensed under the Apache License, Version 2.0.
*/

package v1

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The CRDs are generated and committed; these tests pin what kubectl and virtctl
// rely on so that a marker edit cannot silently change it.

type crdFile struct {
	Spec struct {
		Group string `json:"group"`
		Scope string `json:"scope"`
		Names struct {
			Kind       string   `json:"kind"`
			Plural     string   `json:"plural"`
			Singular   string   `json:"singular"`
			ShortNames []string `json:"shortNames"`
			Categories []string `json:"categories"`
		} `json:"names"`
		Versions []struct {
			Name         string `json:"name"`
			Served       bool   `json:"served"`
			Storage      bool   `json:"storage"`
			Subresources struct {
				Status *struct{} `json:"status"`
			} `json:"subresources"`
			Columns []struct {
				Name        string `json:"name"`
				Type        string `json:"type"`
				JSONPath    string `json:"jsonPath"`
				Priority    int    `json:"priority"`
				Description string `json:"description"`
			} `json:"additionalPrinterColumns"`
			Schema struct {
				OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

type column struct {
	name, jsonPath string
	priority       int
}

func loadCRD(t *testing.T, plural string) *crdFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "crds", "kubevirt.io_"+plural+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &crdFile{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("%s: %d versions", plural, len(crd.Spec.Versions))
	}
	return crd
}

// schemaAt walks a dotted path of property names; "[]" steps into array items.
func schemaAt(t *testing.T, root map[string]any, path string) map[string]any {
	t.Helper()
	node := root
	for _, step := range strings.Split(path, ".") {
		if step == "[]" {
			items, ok := node["items"].(map[string]any)
			if !ok {
				t.Fatalf("%s: no items before %q", path, step)
			}
			node = items
			continue
		}
		props, ok := node["properties"].(map[string]any)
		if !ok {
			t.Fatalf("%s: no properties before %q", path, step)
		}
		next, ok := props[step].(map[string]any)
		if !ok {
			t.Fatalf("%s: no property %q", path, step)
		}
		node = next
	}
	return node
}

func requiredOf(node map[string]any) []string {
	var out []string
	list, _ := node["required"].([]any)
	for _, r := range list {
		out = append(out, r.(string))
	}
	return out
}

func TestCRDNamesColumnsAndSubresources(t *testing.T) {
	for _, tc := range []struct {
		plural, kind string
		short        []string
		columns      []column
	}{
		{"virtualmachines", "VirtualMachine", []string{"vm", "vms"}, []column{
			{"Age", ".metadata.creationTimestamp", 0},
			{"Status", ".status.printableStatus", 0},
			{"Ready", ".status.conditions[?(@.type=='Ready')].status", 0},
		}},
		{"virtualmachineinstances", "VirtualMachineInstance", []string{"vmi", "vmis"}, []column{
			{"Age", ".metadata.creationTimestamp", 0},
			{"Phase", ".status.phase", 0},
			{"IP", ".status.interfaces[0].ipAddress", 0},
			{"NodeName", ".status.nodeName", 0},
			{"Ready", ".status.conditions[?(@.type=='Ready')].status", 0},
			{"Live-Migratable", ".status.conditions[?(@.type=='LiveMigratable')].status", 1},
			{"Paused", ".status.conditions[?(@.type=='Paused')].status", 1},
		}},
		{"virtualmachineinstancemigrations", "VirtualMachineInstanceMigration", []string{"vmim", "vmims"}, []column{
			{"Phase", ".status.phase", 0},
			{"VMI", ".spec.vmiName", 0},
		}},
		{"kubevirts", "KubeVirt", []string{"kv", "kvs"}, []column{
			{"Age", ".metadata.creationTimestamp", 0},
			{"Phase", ".status.phase", 0},
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			crd := loadCRD(t, tc.plural)
			s := crd.Spec
			if s.Group != "kubevirt.io" || s.Scope != "Namespaced" || s.Names.Kind != tc.kind || s.Names.Plural != tc.plural {
				t.Errorf("group/scope/names = %s %s %+v", s.Group, s.Scope, s.Names)
			}
			if !reflect.DeepEqual(s.Names.ShortNames, tc.short) {
				t.Errorf("short names = %v, want %v", s.Names.ShortNames, tc.short)
			}
			if !reflect.DeepEqual(s.Names.Categories, []string{"all"}) {
				t.Errorf("categories = %v", s.Names.Categories)
			}
			v := s.Versions[0]
			if v.Name != "v1" || !v.Served || !v.Storage {
				t.Errorf("version = %s served=%v storage=%v", v.Name, v.Served, v.Storage)
			}
			if v.Subresources.Status == nil {
				t.Error("no status subresource")
			}
			var got []column
			for _, c := range v.Columns {
				got = append(got, column{c.Name, c.JSONPath, c.Priority})
			}
			if !reflect.DeepEqual(got, tc.columns) {
				t.Errorf("printer columns:\n got  %v\n want %v", got, tc.columns)
			}
			spec := schemaAt(t, v.Schema.OpenAPIV3Schema, "spec")
			if spec["x-kubernetes-preserve-unknown-fields"] != nil {
				t.Error("spec must have a real schema, not preserve unknown fields")
			}
			if !reflect.DeepEqual(requiredOf(v.Schema.OpenAPIV3Schema), []string{"spec"}) {
				t.Errorf("required at root = %v", requiredOf(v.Schema.OpenAPIV3Schema))
			}
		})
	}
}

func TestCRDVirtualMachineSchema(t *testing.T) {
	root := loadCRD(t, "virtualmachines").Spec.Versions[0].Schema.OpenAPIV3Schema
	tpl := "spec.template.spec."
	for _, p := range []string{
		"spec.running", "spec.runStrategy", "spec.instancetype.name", "spec.preference.name",
		tpl + "domain.devices.disks.[].name",
		tpl + "domain.devices.disks.[].disk.bus",
		tpl + "domain.devices.disks.[].cdrom.readonly",
		tpl + "domain.devices.disks.[].bootOrder",
		tpl + "domain.devices.interfaces.[].masquerade",
		tpl + "domain.devices.interfaces.[].bridge",
		tpl + "domain.devices.interfaces.[].ports.[].port",
		tpl + "domain.devices.interfaces.[].macAddress",
		tpl + "domain.devices.autoattachGraphicsDevice",
		tpl + "domain.devices.autoattachSerialConsole",
		tpl + "domain.devices.autoattachMemBalloon",
		tpl + "domain.devices.autoattachPodInterface",
		tpl + "domain.devices.rng",
		tpl + "domain.cpu.sockets", tpl + "domain.cpu.cores", tpl + "domain.cpu.threads", tpl + "domain.cpu.model",
		tpl + "domain.memory.guest",
		tpl + "domain.resources.requests", tpl + "domain.resources.limits",
		tpl + "domain.machine.type",
		tpl + "domain.firmware.uuid", tpl + "domain.firmware.serial",
		tpl + "domain.firmware.kernelBoot.container.image",
		tpl + "domain.features.acpi.enabled",
		tpl + "volumes.[].containerDisk.image",
		tpl + "volumes.[].cloudInitNoCloud.userDataBase64",
		tpl + "volumes.[].emptyDisk.capacity",
		tpl + "volumes.[].hostDisk.type",
		tpl + "volumes.[].persistentVolumeClaim.claimName",
		tpl + "networks.[].pod",
		tpl + "terminationGracePeriodSeconds", tpl + "nodeSelector", tpl + "evictionStrategy",
		tpl + "affinity.nodeAffinity", tpl + "tolerations.[].key",
		"status.printableStatus", "status.created", "status.ready",
		"status.stateChangeRequests.[].action", "status.stateChangeRequests.[].uid",
		"status.conditions.[].type", "status.runStrategy", "status.observedGeneration", "status.desiredGeneration",
	} {
		schemaAt(t, root, p)
	}

	// A template's labels must reach the VMI, so its metadata may not be pruned.
	for _, p := range []string{"spec.template.metadata", "spec.dataVolumeTemplates.[].metadata", "spec.dataVolumeTemplates.[].spec"} {
		if schemaAt(t, root, p)["x-kubernetes-preserve-unknown-fields"] != true {
			t.Errorf("%s does not preserve unknown fields", p)
		}
	}
	if got := requiredOf(schemaAt(t, root, "spec")); !reflect.DeepEqual(got, []string{"template"}) {
		t.Errorf("spec required = %v", got)
	}
	if q := schemaAt(t, root, tpl+"domain.memory.guest"); q["x-kubernetes-int-or-string"] != true {
		t.Errorf("memory.guest is not a quantity: %v", q)
	}
	// Zero timestamps encode as null, which a non-nullable schema rejects.
	if c := schemaAt(t, root, "status.conditions.[].lastProbeTime"); c["nullable"] != true {
		t.Errorf("lastProbeTime not nullable: %v", c)
	}
}

func TestCRDVirtualMachineInstanceSchema(t *testing.T) {
	root := loadCRD(t, "virtualmachineinstances").Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, p := range []string{
		"spec.domain.devices.disks.[].serial",
		"spec.domain.firmware.kernelBoot.kernelArgs",
		"spec.domain.firmware.kernelBoot.container.kernelPath",
		"spec.domain.firmware.kernelBoot.container.initrdPath",
		"spec.volumes.[].cloudInitNoCloud.userData",
		"spec.volumes.[].cloudInitNoCloud.networkData",
		"spec.volumes.[].containerDisk.path",
		"spec.volumes.[].hostDisk.path", "spec.volumes.[].hostDisk.capacity",
		"status.nodeName", "status.reason", "status.phase", "status.qosClass",
		"status.phaseTransitionTimestamps.[].phaseTransitionTimestamp",
		"status.interfaces.[].ipAddress", "status.interfaces.[].ipAddresses",
		"status.interfaces.[].mac", "status.interfaces.[].name",
		"status.interfaces.[].interfaceName", "status.interfaces.[].infoSource",
		"status.migrationState.startTimestamp", "status.migrationState.endTimestamp",
		"status.migrationState.sourceNode", "status.migrationState.targetNode",
		"status.migrationState.targetPod", "status.migrationState.targetNodeAddress",
		"status.migrationState.completed", "status.migrationState.failed",
		"status.migrationState.abortRequested", "status.migrationState.abortStatus",
		"status.migrationState.failureReason", "status.migrationState.migrationUid",
		"status.migrationState.mode",
		"status.activePods", "status.guestOSInfo.prettyName", "status.volumeStatus.[].target",
		"status.machine.type", "status.currentCPUTopology.cores", "status.memory.guestCurrent",
	} {
		schemaAt(t, root, p)
	}
	if got := requiredOf(schemaAt(t, root, "spec")); !reflect.DeepEqual(got, []string{"domain"}) {
		t.Errorf("spec required = %v", got)
	}
	if got := requiredOf(schemaAt(t, root, "spec.domain")); !reflect.DeepEqual(got, []string{"devices"}) {
		t.Errorf("domain required = %v", got)
	}
	if got := requiredOf(schemaAt(t, root, "spec.domain.firmware.kernelBoot.container")); !reflect.DeepEqual(got, []string{"image"}) {
		t.Errorf("kernelBoot.container required = %v", got)
	}
	if got := requiredOf(schemaAt(t, root, "spec.volumes.[]")); !reflect.DeepEqual(got, []string{"name"}) {
		t.Errorf("volume required = %v", got)
	}
}

func TestCRDMigrationSchema(t *testing.T) {
	root := loadCRD(t, "virtualmachineinstancemigrations").Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, p := range []string{
		"spec.vmiName", "spec.addedNodeSelector",
		"status.phase", "status.conditions.[].type", "status.phaseTransitionTimestamps.[].phase",
		"status.migrationState.targetNodeAddress", "status.migrationState.migrationUid",
	} {
		schemaAt(t, root, p)
	}
}

func TestCRDKubeVirtSchema(t *testing.T) {
	root := loadCRD(t, "kubevirts").Spec.Versions[0].Schema.OpenAPIV3Schema
	cfg := "spec.configuration."
	for _, p := range []string{
		cfg + "developerConfiguration.featureGates",
		cfg + "developerConfiguration.disabledFeatureGates",
		cfg + "developerConfiguration.useEmulation",
		cfg + "migrations.parallelMigrationsPerCluster",
		cfg + "migrations.parallelOutboundMigrationsPerNode",
		cfg + "migrations.bandwidthPerMigration",
		cfg + "migrations.completionTimeoutPerGiB",
		cfg + "migrations.progressTimeout",
		"spec.certificateRotateStrategy.selfSigned.ca.duration",
		"spec.certificateRotateStrategy.selfSigned.server.renewBefore",
		"status.phase",
	} {
		schemaAt(t, root, p)
	}
	for _, c := range []string{"apiConfiguration", "webhookConfiguration", "controllerConfiguration", "handlerConfiguration"} {
		tb := cfg + c + ".restClient.rateLimiter.tokenBucketRateLimiter"
		// A client cannot work with no tokens: crd_apiserver_test.go sees these refuse such CRs.
		if q := schemaAt(t, root, tb+".qps"); q["type"] != "number" || q["format"] != "float" || q["minimum"] != 0.0 || q["exclusiveMinimum"] != true {
			t.Errorf("%s.qps = %v, want a float above 0", tb, q)
		}
		if b := schemaAt(t, root, tb+".burst"); b["type"] != "integer" || b["minimum"] != 1.0 {
			t.Errorf("%s.burst = %v, want an integer of at least 1", tb, b)
		}
	}
}
