package commands

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/qvirt/qvirt/cmd/virtctl/internal/kvclient"
)

type pauseVerb struct {
	name, gerund string
}

var (
	pause   = pauseVerb{"pause", "pausing"}
	unpause = pauseVerb{"unpause", "unpausing"}
)

// vmiName resolves `vm NAME` or `vmi NAME` to the VMI to act on: a VM's instance carries the
// VM's name.
func vmiName(kind, name string) (string, error) {
	switch strings.ToLower(kind) {
	case "vm", "vms", "virtualmachine", "virtualmachines",
		"vmi", "vmis", "virtualmachineinstance", "virtualmachineinstances":
		return name, nil
	}
	return "", fmt.Errorf("unsupported resource type '%s'", kind)
}

func newPauseCommand(e *env, verb pauseVerb) *cobra.Command {
	var dryRun bool
	long := "Pauses a virtual machine by freezing it. Machine state is kept in memory."
	if verb == unpause {
		long = "Unpauses a virtual machine."
	}
	cmd := &cobra.Command{
		Use:   verb.name + " vm|vmi (VM)|(VMI)",
		Short: capitalize(verb.name) + " a virtual machine",
		Long: long + `
First argument is the resource type, possible types are (case insensitive, both singular and plural forms) virtualmachineinstance (vmi) or virtualmachine (vm).
Second argument is the name of the resource.`,
		Example: fmt.Sprintf("  # %s a virtualmachine called 'myvm':\n  virtctl %s vm myvm", capitalize(verb.name), verb.name),
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := vmiName(args[0], args[1])
			if err != nil {
				return err
			}
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			body := kvclient.PauseOptions{DryRun: kvclient.DryRun(dryRun)}
			if err := c.Put(cmd.Context(), ns, kvclient.VirtualMachineInstances, name, verb.name, body); err != nil {
				return fmt.Errorf("Error %s VirtualMachineInstance %s: %v", verb.gerund, name, err)
			}
			fmt.Fprintf(out(cmd), "VMI %s was scheduled to %s\n", name, verb.name)
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, dryRunUsage)
	return cmd
}

// newVMICommand builds the body-less VMI commands (soft-reboot, reset).
func newVMICommand(e *env, use, subresource, gerund, short string) *cobra.Command {
	return &cobra.Command{
		Use:     use + " (VMI)",
		Short:   short,
		Example: fmt.Sprintf("  # %s a virtualmachineinstance called 'myvmi':\n  virtctl %s myvmi", capitalize(use), use),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			if err := c.Put(cmd.Context(), ns, kvclient.VirtualMachineInstances, name, subresource, nil); err != nil {
				return fmt.Errorf("Error %s VirtualMachineInstance %s: %v", gerund, name, err)
			}
			fmt.Fprintf(out(cmd), "VMI %s was scheduled to %s\n", name, use)
			return nil
		},
	}
}

func newSoftRebootCommand(e *env) *cobra.Command {
	return newVMICommand(e, "soft-reboot", "softreboot", "soft rebooting", "Soft reboot a virtual machine instance")
}

func newResetCommand(e *env) *cobra.Command {
	return newVMICommand(e, "reset", "reset", "resetting", "Reset a virtual machine instance")
}
