package commands

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/qvirt/qvirt/cmd/virtctl/internal/kvclient"
)

const dryRunUsage = "--dry-run=false: Flag used to set whether to perform a dry run or not. If true the command will be executed without performing any changes."

var errForceGrace = errors.New("Must both use --force=true and set --grace-period.")

func vmExample(verb string) string {
	return fmt.Sprintf("  # %s a virtual machine called 'myvm':\n  virtctl %s myvm", capitalize(verb), verb)
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// putVM sends one VM subresource request and reports it as KubeVirt's virtctl does.
func putVM(cmd *cobra.Command, e *env, name, verb string, body any, errFormat string) error {
	c, ns, err := e.client()
	if err != nil {
		return err
	}
	if err := c.Put(cmd.Context(), ns, kvclient.VirtualMachines, name, verb, body); err != nil {
		return fmt.Errorf(errFormat, err)
	}
	fmt.Fprintf(out(cmd), "VM %s was scheduled to %s\n", name, verb)
	return nil
}

func newStartCommand(e *env) *cobra.Command {
	var paused, dryRun bool
	cmd := &cobra.Command{
		Use:     "start (VM)",
		Short:   "Start a virtual machine.",
		Example: vmExample("start"),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := kvclient.StartOptions{Paused: paused, DryRun: kvclient.DryRun(dryRun)}
			return putVM(cmd, e, args[0], "start", body, "Error starting VirtualMachine %v")
		},
	}
	cmd.Flags().BoolVar(&paused, "paused", false, "--paused=false: If set to true, start virtual machine in paused state")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, dryRunUsage)
	return cmd
}

// stopFlags are the flags stop and restart share: a grace period only together with --force.
type stopFlags struct {
	force       bool
	gracePeriod int64
	dryRun      bool
}

func (f *stopFlags) bind(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.force, "force", false, "--force=false: Only used when grace-period=0. If true, immediately remove VMI pod from API and bypass graceful deletion. Note that immediate deletion of some resources may result in inconsistency or data loss and requires confirmation.")
	cmd.Flags().Int64Var(&f.gracePeriod, "grace-period", -1, "--grace-period=-1: Period of time in seconds given to the VMI to terminate gracefully. Can only be set to 0 when --force is true (force deletion). Currently only setting 0 is supported.")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, dryRunUsage)
}

// grace returns the grace period to send, nil when none was asked for.
func (f *stopFlags) grace(cmd *cobra.Command) (*int64, error) {
	if cmd.Flags().Changed("grace-period") != f.force {
		return nil, errForceGrace
	}
	if !f.force {
		return nil, nil
	}
	g := f.gracePeriod
	return &g, nil
}

func newStopCommand(e *env) *cobra.Command {
	var f stopFlags
	cmd := &cobra.Command{
		Use:     "stop (VM)",
		Short:   "Stop a virtual machine.",
		Example: vmExample("stop"),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			grace, err := f.grace(cmd)
			if err != nil {
				return err
			}
			errFormat := "error stopping VirtualMachine %v"
			if grace != nil {
				errFormat = "error force stopping VirtualMachine: %v"
			}
			body := kvclient.StopOptions{GracePeriod: grace, DryRun: kvclient.DryRun(f.dryRun)}
			return putVM(cmd, e, args[0], "stop", body, errFormat)
		},
	}
	f.bind(cmd)
	return cmd
}

func newRestartCommand(e *env) *cobra.Command {
	var f stopFlags
	cmd := &cobra.Command{
		Use:     "restart (VM)",
		Short:   "Restart a virtual machine.",
		Example: vmExample("restart"),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			grace, err := f.grace(cmd)
			if err != nil {
				return err
			}
			errFormat := "error restarting VirtualMachine: %v"
			if grace != nil {
				errFormat = "error force restarting VirtualMachine: %v"
			}
			body := kvclient.RestartOptions{GracePeriodSeconds: grace, DryRun: kvclient.DryRun(f.dryRun)}
			return putVM(cmd, e, args[0], "restart", body, errFormat)
		},
	}
	f.bind(cmd)
	return cmd
}

func newMigrateCommand(e *env) *cobra.Command {
	var (
		dryRun   bool
		selector map[string]string
	)
	cmd := &cobra.Command{
		Use:     "migrate (VM)",
		Short:   "Migrate a virtual machine.",
		Example: vmExample("migrate"),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := kvclient.MigrateOptions{AddedNodeSelector: selector, DryRun: kvclient.DryRun(dryRun)}
			return putVM(cmd, e, args[0], "migrate", body, "Error migrating VirtualMachine %v")
		},
	}
	cmd.Flags().StringToStringVar(&selector, "addedNodeSelector", nil, "--addedNodeSelector=key=value1,key2=value2: configure an additional node selector for the one-off migration attempt. AddedNodeSelector can only restrict constraints already set on the VM.")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, dryRunUsage)
	return cmd
}

func newMigrateCancelCommand(e *env) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:     "migrate-cancel (VM)",
		Short:   "Cancel migration of a virtual machine.",
		Example: vmExample("migrate-cancel"),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			migs, err := c.Migrations(cmd.Context(), ns, name)
			if err != nil {
				return fmt.Errorf("Error fetching virtual machine instance migration list %v", err)
			}
			// Finished migrations stay around; at most one is still running.
			for i := range migs {
				if kvclient.MigrationFinished(&migs[i]) {
					continue
				}
				if err := c.DeleteMigration(cmd.Context(), ns, migs[i].Name, kvclient.DryRun(dryRun)); err != nil {
					return fmt.Errorf("Error canceling migration %s of a VirtualMachine %s: %v", migs[i].Name, name, err)
				}
				fmt.Fprintf(out(cmd), "migration of VMI %s was canceled\n", name)
				return nil
			}
			return fmt.Errorf("Found no migration to cancel for %s", name)
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, dryRunUsage)
	return cmd
}
