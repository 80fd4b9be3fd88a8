package commands

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func newScreenshotCommand(e *env) *cobra.Command {
	var (
		file       string
		moveCursor bool
	)
	cmd := &cobra.Command{
		Use:   "screenshot (VMI)",
		Short: "Create a VNC screenshot of a virtual machine instance.",
		Example: `  # Take a VNC screenshot of 'testvmi' in png format:
  virtctl screenshot testvmi -f screenshot.png
  # Write it to stdout:
  virtctl screenshot testvmi -f - | display`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			c, ns, err := e.client()
			if err != nil {
				return err
			}
			png, err := c.Screenshot(cmd.Context(), ns, name, moveCursor)
			if err != nil {
				return fmt.Errorf("Can't access VMI %s: %v", name, err)
			}
			if file == "-" {
				if _, err := out(cmd).Write(png); err != nil {
					return fmt.Errorf("failed to write image to stdout: %v", err)
				}
				return nil
			}
			if err := os.WriteFile(file, png, 0o644); err != nil {
				return fmt.Errorf("Can't write image to a file: %v", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "where to store the VNC screenshot in PNG format. Use '-' for stdout")
	cmd.Flags().BoolVarP(&moveCursor, "move-cursor", "m", false, "move the cursor to wake up the screen in case of screensavers")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}
