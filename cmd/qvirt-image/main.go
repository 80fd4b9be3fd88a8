// qvirt-image puts images of files into the local cluster's registry, and fills the local OCI
// image store that local mode takes containerDisk and kernelBoot images from.
//
//	qvirt-image push --registry ADDR [--username U --password P] REF PATH_IN_IMAGE=HOST_FILE ...
//	qvirt-image --store DIR add REF PATH_IN_IMAGE=HOST_FILE ...
//	qvirt-image --store DIR file REF [PATH_IN_IMAGE]
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

	"github.com/qvirt/qvirt/node/images"
)

func main() {
	store := flag.String("store", "", "OCI image layout directory (created when missing)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `usage:
  qvirt-image push [--registry ADDR] [--username U --password P] REF PATH_IN_IMAGE=HOST_FILE ...
                                                                  push an image of one layer to a registry
  qvirt-image --store DIR add REF PATH_IN_IMAGE=HOST_FILE ...   store an image of one layer
  qvirt-image --store DIR file REF [PATH_IN_IMAGE]               print the host path of a file in an image
                                                                  (no path: the single file under /disk/)
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
	if err := run(*store, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "qvirt-image:", err)
		os.Exit(1)
	}
}

func run(dir string, args []string) error {
	if dir == "" || len(args) < 2 {
		flag.Usage()
		os.Exit(2)
	}
	s, err := images.Open(dir)
	if err != nil {
		return err
	}
	switch cmd, ref := args[0], args[1]; cmd {
	case "add":
		files, err := parseFiles(args[2:])
		if err != nil {
			return err
		}
		if err := s.Add(ref, files); err != nil {
			return err
		}
		digest, err := s.Digest(ref)
		if err != nil {
			return err
		}
		norm, _ := images.Normalize(ref)
		fmt.Printf("%s %s\n", norm, digest)
	case "file":
		var p string
		if len(args) > 2 {
			p = args[2]
		}
		host, err := s.File(ref, p)
		if err != nil {
			return err
		}
		fmt.Println(host)
	default:
		return fmt.Errorf("unknown command %q (add, file)", cmd)
	}
	return nil
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
