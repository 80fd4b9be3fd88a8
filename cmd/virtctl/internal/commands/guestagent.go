package commands

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
)

// newGuestAgentCommand is guestosinfo, userlist or fslist: what the VMI's guest agent reports,
// printed as indented JSON, as KubeVirt's virtctl does.
func newGuestAgentCommand(e *env, use, subresource, short string) *cobra.Command {
	return &cobra.Command{
		Use:   use + " (VMI)",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			raw, err := c.GuestAgent(cmd.Context(), ns, args[0], subresource)
			if err != nil {
				return fmt.Errorf("Error getting %s of VirtualMachineInstance %s, %v", subresource, args[0], err)
			}
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				return fmt.Errorf("Cannot unmarshal %s: %v", subresource, err)
			}
			b, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(out(cmd), string(b))
			return err
		},
	}
}
