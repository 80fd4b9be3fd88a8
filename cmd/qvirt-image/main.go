// qvirt-image puts images of files (a containerDisk's disk, a kernelBoot kernel and initrd) into a
// registry, such as the local cluster's, without a container engine:
//
//	qvirt-image push --registry ADDR [--username U --password P] REF PATH_IN_IMAGE=HOST_FILE ...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `usage:
  qvirt-image push [--registry ADDR] [--username U --password P] REF PATH_IN_IMAGE=HOST_FILE ...
                                                                  push an image of one layer to a registry
`)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.Arg(0) == "push" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := pushCommand(ctx, flag.Args()[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "qvirt-image:", err)
			os.Exit(1)
		}
		return
	}
	flag.Usage()
	os.Exit(2)
}

func parseFiles(args []string) (map[string]string, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("give at least one PATH_IN_IMAGE=HOST_FILE")
	}
	files := map[string]string{}
	for _, a := range args {
		in, host, ok := strings.Cut(a, "=")
		if !ok || in == "" || host == "" {
			return nil, fmt.Errorf("%q is not PATH_IN_IMAGE=HOST_FILE", a)
		}
		files[in] = host
	}
	return files, nil
}
