package disks

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	launcherapi "github.com/qvirt/qvirt/launcher/api"
)

// secretData reads cloud-init data from a secret volume: the first of keys it holds, as KubeVirt
// looks for userdata or userData (networkdata or networkData).
func secretData(dir string, keys ...string) (string, error) {
	for _, k := range keys {
		b, err := os.ReadFile(filepath.Join(dir, k))
		if err == nil {
			return string(b), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("cloud-init secret: %w", err)
		}
	}
	return "", fmt.Errorf("cloud-init secret in %s has no %s key", dir, strings.Join(keys, " or "))
}

// NoCloudLabel is the volume label cloud-init's NoCloud datasource looks for.
const NoCloudLabel = "cidata"

// WriteNoCloudISO writes a NoCloud seed: an ISO9660 volume labelled cidata holding user-data,
// meta-data and, when given, network-config. Rock Ridge keeps the file names as cloud-init
// expects them (plain ISO9660 would turn "user-data" into "user_dat").
func WriteNoCloudISO(path string, src *launcherapi.CloudInitNoCloudSource) error {
	user, network := src.GetUserData(), src.GetNetworkData()
	var err error
	if dir := src.GetUserDataDir(); dir != "" {
		if user, err = secretData(dir, "userdata", "userData"); err != nil {
			return err
		}
	}
	if dir := src.GetNetworkDataDir(); dir != "" {
		if network, err = secretData(dir, "networkdata", "networkData"); err != nil {
			return err
		}
	}
	files := map[string]string{"user-data": user, "meta-data": src.GetMetaData()}
	if network != "" {
		files["network-config"] = network
	}
	size := int64(1 << 20)
	for _, c := range files {
		size += int64(len(c))
	}
	_ = os.Remove(path)
	work, err := os.MkdirTemp("", "nocloud-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	img, err := diskfs.Create(path, size, diskfs.SectorSizeDefault)
	if err != nil {
		return fmt.Errorf("create seed image: %w", err)
	}
	defer img.Close()
	img.LogicalBlocksize = 2048
	fs, err := img.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeISO9660, VolumeLabel: NoCloudLabel, WorkDir: work})
	if err != nil {
		return fmt.Errorf("create seed filesystem: %w", err)
	}
	for name, content := range files {
		f, err := fs.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return fmt.Errorf("seed %s: %w", name, err)
		}
		if _, err := f.Write([]byte(content)); err != nil {
			return fmt.Errorf("seed %s: %w", name, err)
		}
	}
	iso, ok := fs.(*iso9660.FileSystem)
	if !ok {
		return fmt.Errorf("seed filesystem is %T, not ISO9660", fs)
	}
	if err := iso.Finalize(iso9660.FinalizeOptions{RockRidge: true, VolumeIdentifier: NoCloudLabel}); err != nil {
		return fmt.Errorf("finalize seed: %w", err)
	}
	return nil
}
