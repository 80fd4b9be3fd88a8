package commands

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/qvirt/qvirt/internal/version"
)

func newVersionCommand(e *env) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:     "version",
		Short:   "Print the client and server version information.",
		Example: "  # Print the client and server versions for the current context:\n  virtctl version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(out(cmd), "Client Version: %#v\n", version.Get())
			if clientOnly {
				return nil
			}
			c, _, err := e.client()
			if err != nil {
				return err
			}
			server, err := c.ServerVersion(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(out(cmd), "Server Version: %#v\n", server)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&clientOnly, "client", "c", false, "Client version only (no server required).")
	return cmd
}
