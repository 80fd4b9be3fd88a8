package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/qvirt/qvirt/api/v1"
	"github.com/qvirt/qvirt/cmd/virtctl/internal/kvclient"
)

// memory-dump as KubeVirt's virtctl: get asks the VM for a dump into a claim (made first with
// --create-claim), remove drops the association. Downloading a dump needs KubeVirt's
// VirtualMachineExport, which qvirt does not serve, so those flags are refused.

type memoryDumpFlags struct {
	claimName, storageClass, accessMode string
	createClaim                         bool
	// The download flags, refused.
	portForward               bool
	format, localPort, output string
}

// downloadFlags are the flags that download a dump.
var downloadFlags = []string{"output", "port-forward", "format", "local-port"}

var errNoDownload = errors.New("qvirt does not support downloading memory dumps (memory-dump download, --output, --port-forward, --format, --local-port): " +
	"that needs KubeVirt's VirtualMachineExport, which qvirt does not serve; the dump is written to the claim, mount it to read it")

func newMemoryDumpCommand(e *env) *cobra.Command {
	var f memoryDumpFlags
	cmd := &cobra.Command{
		Use:   "memory-dump get/download/remove (VM)",
		Short: "Dump the memory of a running VM to a pvc",
		Example: `  #Dump memory of a virtual machine instance called 'myvm' to an existing pvc called 'memoryvolume'.
  virtctl memory-dump get myvm --claim-name=memoryvolume

  #Create a PVC called 'memoryvolume' and dump the memory of a virtual machine instance called 'myvm' to it.
  virtctl memory-dump get myvm --claim-name=memoryvolume --create-claim

  #Dump memory again to the same virtual machine with an already associated pvc(existing memory dump on vm status).
  virtctl memory-dump get myvm

  #Remove the association of the memory dump pvc (to be able to dump to another pvc).
  virtctl memory-dump remove myvm`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			action, vm := args[0], args[1]
			if err := f.check(cmd, action); err != nil {
				return err
			}
			c, ns, err := e.client()
			if err != nil {
				return fmt.Errorf("cannot obtain KubeVirt client: %v", err)
			}
			if action == "remove" {
				if err := c.Put(cmd.Context(), ns, kvclient.VirtualMachines, vm, "removememorydump", nil); err != nil {
					return fmt.Errorf("error removing memory dump association, %v", err)
				}
				fmt.Fprintf(out(cmd), "Successfully submitted remove memory dump association of VM %s\n", vm)
				return nil
			}
			if f.createClaim {
				if err := f.createPVC(cmd, c, ns, vm); err != nil {
					return err
				}
			}
			if err := c.Put(cmd.Context(), ns, kvclient.VirtualMachines, vm, "memorydump", &kvclient.MemoryDumpRequest{ClaimName: f.claimName}); err != nil {
				return fmt.Errorf("error dumping vm memory, %v", err)
			}
			fmt.Fprintf(out(cmd), "Successfully submitted memory dump request of VM %s\n", vm)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.claimName, "claim-name", "", "pvc name to contain the memory dump")
	fl.BoolVar(&f.createClaim, "create-claim", false, "Create the pvc that will contain the memory dump")
	fl.BoolVar(&f.portForward, "port-forward", false, "Configure and set port-forward in a random port to download the memory dump")
	fl.StringVar(&f.format, "format", "", "Specifies the format of the memory dump download (gzipped or raw).")
	fl.StringVar(&f.localPort, "local-port", "0", "Specify port for port-forward")
	fl.StringVar(&f.storageClass, "storage-class", "", "The storage class for the PVC.")
	fl.StringVar(&f.accessMode, "access-mode", "", "The access mode for the PVC.")
	fl.StringVar(&f.output, "output", "", "Specifies the output path of the memory dump to be downloaded.")
	return cmd
}

// check refuses, before anything is sent, what cannot be done or would be ignored.
func (f *memoryDumpFlags) check(cmd *cobra.Command, action string) error {
	switch action {
	case "get", "remove":
	case "download":
		return errNoDownload
	default:
		return fmt.Errorf("invalid action type %s", action)
	}
	for _, name := range downloadFlags {
		if cmd.Flags().Changed(name) {
			return errNoDownload
		}
	}
	var claimFlags []string
	for _, name := range []string{"claim-name", "create-claim", "storage-class", "access-mode"} {
		if cmd.Flags().Changed(name) {
			claimFlags = append(claimFlags, "--"+name)
		}
	}
	switch {
	case action == "remove" && len(claimFlags) > 0:
		return fmt.Errorf("memory-dump remove takes no %s", strings.Join(claimFlags, ", "))
	case !f.createClaim && (f.storageClass != "" || f.accessMode != ""):
		return errors.New("--storage-class and --access-mode describe the claim --create-claim makes; without it they would be ignored")
	case f.createClaim && f.claimName == "":
		return errors.New("missing claim name")
	}
	switch m := corev1.PersistentVolumeAccessMode(f.accessMode); m {
	case "", corev1.ReadWriteOnce, corev1.ReadWriteMany:
	case corev1.ReadOnlyMany:
		return errors.New("cannot dump memory to a readonly pvc, use either ReadWriteOnce or ReadWriteMany if supported")
	default:
		return errors.New("invalid access mode, use either ReadWriteOnce or ReadWriteMany if supported")
	}
	return nil
}

// createPVC makes the claim a dump of the VM's guest fits in, as KubeVirt's virtctl does: only
// for a VM without an associated dump, and never over an existing claim.
func (f *memoryDumpFlags) createPVC(cmd *cobra.Command, c *kvclient.Client, ns, vmName string) error {
	ctx := cmd.Context()
	vm, err := c.VirtualMachine(ctx, ns, vmName)
	if err != nil {
		return err
	}
	if vm.Status.MemoryDumpRequest != nil {
		return errors.New("please remove current memory dump association before creating a new claim for a new memory dump")
	}
	if err := noClaim(ctx, c, ns, f.claimName); err != nil {
		return err
	}
	vmi, err := c.VirtualMachineInstance(ctx, ns, vmName)
	if err != nil {
		return err
	}
	size, err := v1.MemoryDumpClaimSize(vmi)
	if err != nil {
		return err
	}
	// KubeVirt asks CDI for the filesystem overhead and says so when it cannot; qvirt has no CDI.
	fmt.Fprintln(out(cmd), "Using default 5.5% filesystem overhead for pvc size")
	mode := corev1.ReadWriteOnce
	if f.accessMode != "" {
		mode = corev1.PersistentVolumeAccessMode(f.accessMode)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: f.claimName, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{mode},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if f.storageClass != "" {
		pvc.Spec.StorageClassName = &f.storageClass
	}
	if err := c.CreatePersistentVolumeClaim(ctx, pvc); err != nil {
		return err
	}
	fmt.Fprintf(out(cmd), "PVC %s/%s created\n", ns, f.claimName)
	return nil
}

func noClaim(ctx context.Context, c *kvclient.Client, ns, name string) error {
	_, err := c.PersistentVolumeClaim(ctx, ns, name)
	switch {
	case err == nil:
		return fmt.Errorf("PVC %s/%s already exists, check if it should be created if not remove create flag", ns, name)
	case apierrors.IsNotFound(err):
		return nil
	}
	return err
}
