// Command csi-loop is the sandbox's CSI driver on real nodes: each volume is a sparse file under --volumes, formatted
// as XFS, attached to a loop device and mounted where the kubelet asks, so a volume has a real capacity that grows
// online (ControllerExpandVolume grows the file, NodeExpandVolume refreshes the loop device and runs xfs_growfs).
//
// Two modes, one binary:
//
//	csi-loop --mode=controller --endpoint=/run/…/controller.sock --volumes=DIR
//	    Identity + Controller; the real external-provisioner and external-resizer talk to this socket.
//	csi-loop --mode=node --node-id=node-1 --volumes=DIR [--kubelet-dir=/var/lib/kubelet]
//	    Identity + Node, on <kubelet-dir>/plugins/<driver>/csi.sock, and the kubelet's plugin registration on
//	    <kubelet-dir>/plugins_registry/<driver>-reg.sock (node-driver-registrar's job: the module proxy does not
//	    serve it, so the driver answers the kubelet itself).
//
// XFS, not ext4: growing a mounted ext4 needs CAP_SYS_RESOURCE, which this machine kind's bounding set lacks;
// xfs_growfs needs CAP_SYS_ADMIN only. XFS refuses file systems under 300 MiB, so a volume is at least that.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"

	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const (
	driverName = "loop.csi.opsmanager.dev"
	minBytes   = 300 << 20 // mkfs.xfs refuses less
	defaultGiB = 1 << 30
)

type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer
	registration.UnimplementedRegistrationServer

	volumes  string
	nodeID   string
	endpoint string // the node socket the kubelet is told about
	mu       sync.Mutex
}

func main() {
	mode := flag.String("mode", "node", "controller or node")
	endpoint := flag.String("endpoint", "", "the CSI socket (controller mode)")
	volumes := flag.String("volumes", "", "the directory of the volumes' backing files")
	nodeID := flag.String("node-id", "", "this node's name (node mode)")
	kubeletDir := flag.String("kubelet-dir", "/var/lib/kubelet", "the kubelet's root directory (node mode)")
	flag.Parse()
	if *volumes == "" {
		log.Fatal("--volumes is required")
	}
	d := &driver{volumes: *volumes, nodeID: *nodeID}
	if err := os.MkdirAll(*volumes, 0o755); err != nil {
		log.Fatal(err)
	}
	var servers []*grpc.Server
	switch *mode {
	case "controller":
		s := grpc.NewServer(grpc.UnaryInterceptor(logged))
		csi.RegisterIdentityServer(s, d)
		csi.RegisterControllerServer(s, d)
		serve(s, *endpoint)
		servers = append(servers, s)
	case "node":
		if *nodeID == "" {
			log.Fatal("--node-id is required in node mode")
		}
		d.endpoint = filepath.Join(*kubeletDir, "plugins", driverName, "csi.sock")
		s := grpc.NewServer(grpc.UnaryInterceptor(logged))
		csi.RegisterIdentityServer(s, d)
		csi.RegisterNodeServer(s, d)
		serve(s, d.endpoint)
		r := grpc.NewServer(grpc.UnaryInterceptor(logged))
		registration.RegisterRegistrationServer(r, d)
		// the registration socket last: the kubelet dials the CSI socket as soon as it sees this one
		serve(r, filepath.Join(*kubeletDir, "plugins_registry", driverName+"-reg.sock"))
		servers = append(servers, s, r)
	default:
		log.Fatalf("unknown --mode %q", *mode)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	for _, s := range servers {
		s.Stop()
	}
}

func serve(s *grpc.Server, path string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		log.Fatal(err)
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("serving on %s", path)
	go func() {
		if err := s.Serve(l); err != nil {
			log.Printf("%s: %v", path, err)
		}
	}()
}

func logged(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil {
		log.Printf("%s: %v", info.FullMethod, err)
	} else if !strings.HasPrefix(info.FullMethod, "/csi.v1.Identity/") {
		log.Printf("%s: ok", info.FullMethod)
	}
	return resp, err
}

// -- registration (what node-driver-registrar does) --------------------------------------------------------------

func (d *driver) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{Type: registration.CSIPlugin, Name: driverName, Endpoint: d.endpoint,
		SupportedVersions: []string{"1.0.0"}}, nil
}

func (d *driver) NotifyRegistrationStatus(_ context.Context, s *registration.RegistrationStatus) (
	*registration.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		log.Printf("the kubelet refused the registration: %s", s.Error)
	} else {
		log.Printf("registered with the kubelet")
	}
	return &registration.RegistrationStatusResponse{}, nil
}

// -- identity -----------------------------------------------------------------------------------------------------

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: driverName, VendorVersion: "0.1.0"}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (
	*csi.GetPluginCapabilitiesResponse, error) {
	service := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: t}}}
	}
	expansion := &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
		VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		service(csi.PluginCapability_Service_CONTROLLER_SERVICE), expansion}}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// -- controller ---------------------------------------------------------------------------------------------------

func (d *driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (
	*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// volumeID is a hash of the request's name: CreateVolume is retried with the same name and must be idempotent.
func volumeID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "loop-" + hex.EncodeToString(sum[:])[:20]
}

func (d *driver) backing(id string) (string, error) {
	if !strings.HasPrefix(id, "loop-") || strings.ContainsAny(id, "/.") {
		return "", status.Errorf(codes.NotFound, "no volume %q", id)
	}
	return filepath.Join(d.volumes, id+".img"), nil
}

func wanted(r *csi.CapacityRange) int64 {
	size := int64(defaultGiB)
	if r != nil && r.RequiredBytes > 0 {
		size = r.RequiredBytes
	}
	size = max(size, minBytes)
	return (size + 4095) &^ 4095
}

func (d *driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.Name == "" {
		return nil, status.Error(codes.InvalidArgument, "a name is required")
	}
	for _, c := range req.VolumeCapabilities {
		if c.GetBlock() != nil {
			return nil, status.Error(codes.InvalidArgument, "block volumes are not supported")
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := volumeID(req.Name)
	path, _ := d.backing(id)
	size := wanted(req.CapacityRange)
	if info, err := os.Stat(path); err == nil {
		if lim := req.CapacityRange.GetLimitBytes(); lim > 0 && info.Size() > lim {
			return nil, status.Errorf(codes.AlreadyExists, "%s exists with %d bytes", req.Name, info.Size())
		}
		return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id, CapacityBytes: info.Size()}}, nil
	}
	partial := path + ".partial"
	if err := os.WriteFile(partial, nil, 0o600); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := os.Truncate(partial, size); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if out, err := exec.Command("mkfs.xfs", "-q", "-f", partial).CombinedOutput(); err != nil {
		_ = os.Remove(partial)
		return nil, status.Errorf(codes.Internal, "mkfs.xfs: %v: %s", err, out)
	}
	if err := os.Rename(partial, path); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id, CapacityBytes: size}}, nil
}

func (d *driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	path, err := d.backing(req.VolumeId)
	if err != nil {
		return &csi.DeleteVolumeResponse{}, nil // never ours: nothing to delete
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (
	*csi.ControllerExpandVolumeResponse, error) {
	path, err := d.backing(req.VolumeId)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	info, err := os.Stat(path)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s: %v", req.VolumeId, err)
	}
	size := wanted(req.CapacityRange)
	if size > info.Size() {
		if err := os.Truncate(path, size); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	} else {
		size = info.Size() // never shrinks
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: true}, nil
}

func (d *driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (
	*csi.ValidateVolumeCapabilitiesResponse, error) {
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: req.VolumeCapabilities}}, nil
}

// -- node ---------------------------------------------------------------------------------------------------------

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.nodeID}, nil
}

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (
	*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS, csi.NodeServiceCapability_RPC_EXPAND_VOLUME} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "", status.Errorf(codes.Internal, "%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// loopOf is the loop device backed by path, "" if none.
func loopOf(path string) (string, error) {
	out, err := run("losetup", "-j", path, "-O", "NAME", "-n")
	if err != nil {
		return "", err
	}
	fields := strings.Fields(out)
	if len(fields) == 0 {
		return "", nil
	}
	return fields[0], nil
}

func mounted(target string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == target {
			return true
		}
	}
	return false
}

func (d *driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (
	*csi.NodePublishVolumeResponse, error) {
	path, err := d.backing(req.VolumeId)
	if err != nil {
		return nil, err
	}
	if req.TargetPath == "" {
		return nil, status.Error(codes.InvalidArgument, "a target path is required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if mounted(req.TargetPath) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %s: %v", req.VolumeId, err)
	}
	if err := os.MkdirAll(req.TargetPath, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	dev, err := loopOf(path)
	if err == nil && dev == "" {
		dev, err = run("losetup", "-f", "--show", path)
	}
	if err != nil {
		return nil, err
	}
	args := []string{dev, req.TargetPath}
	if req.Readonly {
		args = append([]string{"-o", "ro"}, args...)
	}
	if _, err := run("mount", args...); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (
	*csi.NodeUnpublishVolumeResponse, error) {
	path, err := d.backing(req.VolumeId)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if mounted(req.TargetPath) {
		if _, err := run("umount", req.TargetPath); err != nil {
			return nil, err
		}
	}
	_ = os.Remove(req.TargetPath)
	if dev, err := loopOf(path); err == nil && dev != "" {
		if _, err := run("losetup", "-d", dev); err != nil {
			return nil, err
		}
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (d *driver) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (
	*csi.NodeExpandVolumeResponse, error) {
	path, err := d.backing(req.VolumeId)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := loopOf(path)
	if err != nil {
		return nil, err
	}
	if dev == "" || !mounted(req.VolumePath) {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not mounted at %s", req.VolumeId,
			req.VolumePath)
	}
	if _, err := run("losetup", "-c", dev); err != nil {
		return nil, err
	}
	if _, err := run("xfs_growfs", req.VolumePath); err != nil {
		return nil, err
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: info.Size()}, nil
}

func (d *driver) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (
	*csi.NodeGetVolumeStatsResponse, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(req.VolumePath, &fs); err != nil {
		return nil, status.Errorf(codes.NotFound, "%s: %v", req.VolumePath, err)
	}
	bsize := fs.Bsize
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(fs.Blocks) * bsize, Available: int64(fs.Bavail) * bsize,
			Used: int64(fs.Blocks-fs.Bfree) * bsize},
		{Unit: csi.VolumeUsage_INODES, Total: int64(fs.Files), Available: int64(fs.Ffree),
			Used: int64(fs.Files - fs.Ffree)},
	}}, nil
}
