package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/qvirt/qvirt/internal/localcluster/ociimages"
)

const pushUsage = `usage:
  qvirt-image push [--registry ADDR] [--username U (--password P | --password-stdin)] [--owner UID:GID]
                   REF PATH_IN_IMAGE=HOST_FILE ...
builds a linux/amd64 image of one layer holding the files and pushes it over plain HTTP to the
registry at ADDR as REF's repository and tag. ADDR defaults to REF's host
(localhost:5000/qvirt/my-disk:v1); with --registry, REF may name just repository:tag.
`

// pushCommand is `qvirt-image push ...`; out receives "ADDR/REPO:TAG DIGEST".
func pushCommand(ctx context.Context, args []string, stdin io.Reader, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	fs.SetOutput(errOut)
	registry := fs.String("registry", "", "host:port of the registry (default: the host in REF)")
	username := fs.String("username", "", "user for the registry's basic auth")
	password := fs.String("password", "", "password for the registry's basic auth")
	passwordStdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input")
	owner := fs.String("owner", "0:0", "UID:GID owning the files (107:107 for KubeVirt containerDisks)")
	fs.Usage = func() {
		fmt.Fprint(errOut, pushUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		fs.Usage()
		return errors.New("push: give REF and at least one PATH_IN_IMAGE=HOST_FILE")
	}
	addr, repoTag, err := pushTarget(fs.Arg(0), *registry)
	if err != nil {
		return err
	}
	uid, gid, err := parseOwner(*owner)
	if err != nil {
		return err
	}
	files, err := parseFiles(fs.Args()[1:])
	if err != nil {
		return err
	}
	var entries []ociimages.File
	for in, host := range files {
		entries = append(entries, ociimages.File{Path: "/" + strings.TrimPrefix(in, "/"), Source: host, UID: uid, GID: gid})
	}
	if *passwordStdin {
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read the password: %w", err)
		}
		*password = strings.TrimRight(line, "\r\n")
	}
	var auth authn.Authenticator
	if *username != "" {
		auth = &authn.Basic{Username: *username, Password: *password}
	} else if *password != "" {
		return errors.New("push: --password without --username")
	}
	img, err := ociimages.Files(entries...)
	if err != nil {
		return err
	}
	if err := ociimages.Push(ctx, img, addr, repoTag, auth); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s/%s %s\n", addr, repoTag, digest)
	return nil
}

// pushTarget splits REF into the registry to send to and the repository:tag there. A REF without
// a host of its own needs --registry.
func pushTarget(ref, registry string) (addr, repoTag string, err error) {
	r, err := name.ParseReference(ref, name.WeakValidation)
	if err != nil {
		return "", "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	tag, ok := r.(name.Tag)
	if !ok {
		return "", "", fmt.Errorf("image reference %q: push names an image by tag, not by digest", ref)
	}
	addr = registry
	if addr == "" {
		if !hasHost(ref) {
			return "", "", fmt.Errorf("image reference %q names no registry host: give --registry ADDR", ref)
		}
		addr = tag.RegistryStr()
	}
	return addr, tag.RepositoryStr() + ":" + tag.TagStr(), nil
}

// hasHost applies the Docker rule: a first component with a dot or a port, or localhost, is a host.
func hasHost(ref string) bool {
	first, _, ok := strings.Cut(ref, "/")
	return ok && (strings.ContainsAny(first, ".:") || first == "localhost")
}

func parseOwner(s string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(s, ":")
	if ok {
		uid, err = strconv.Atoi(u)
		if err == nil {
			gid, err = strconv.Atoi(g)
		}
	}
	if !ok || err != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("--owner %q is not UID:GID", s)
	}
	return uid, gid, nil
}
