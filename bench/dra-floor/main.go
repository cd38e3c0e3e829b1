// dra-floor: the smallest honest DRA kubelet plugin, built on the Kubernetes project's own
// helper (k8s.io/dynamic-resource-allocation/kubeletplugin), to measure NodePrepareResources
// against devicehost's on the same node and kubelet (make bench-e2e; docs/dra.md).
//
// It does the work every DRA driver's prepare must do, as devicehost does it and as the
// field's example driver (kubernetes-sigs/dra-example-driver) does it: publish its devices
// in a ResourceSlice; on prepare, write one CDI spec per claim (named after the claim UID,
// so a runtime's cached spec is never reused) and record the claim in a checkpoint file,
// each written atomically (a temporary file, fsync, rename); on unprepare, remove both.
// Nothing else: no health, no config, no vendor library.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

const driverName = "floor.bench.devicehost.io"

type floor struct {
	cdiDir     string
	checkpoint string
	mu         sync.Mutex
	prepared   map[types.UID][]string // claim UID -> the devices it holds
}

func (f *floor) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	result := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		result[claim.UID] = f.prepare(claim)
	}
	return result, f.save()
}

func (f *floor) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s is not allocated", claim.UID)}
	}
	var devices []kubeletplugin.Device
	var names []string
	spec := map[string]any{"cdiVersion": "0.6.0", "kind": driverName + "/claim"}
	var entries []map[string]any
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != driverName {
			continue
		}
		name := string(claim.UID) + "-" + r.Device
		entries = append(entries, map[string]any{
			"name":           name,
			"containerEdits": map[string]any{"env": []string{"FLOOR_DEVICE=" + r.Device}},
		})
		names = append(names, r.Device)
		devices = append(devices, kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			CDIDeviceIDs: []string{driverName + "/claim=" + name},
		})
	}
	spec["devices"] = entries
	if err := writeJSON(f.specPath(claim.UID), spec); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	f.prepared[claim.UID] = names
	return kubeletplugin.PrepareResult{Devices: devices}
}

func (f *floor) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	result := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		err := os.Remove(f.specPath(claim.UID))
		if os.IsNotExist(err) {
			err = nil // unprepare is idempotent
		}
		delete(f.prepared, claim.UID)
		result[claim.UID] = err
	}
	return result, f.save()
}

func (f *floor) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

func (f *floor) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func (f *floor) specPath(uid types.UID) string {
	return filepath.Join(f.cdiDir, driverName+"-"+string(uid)+".json")
}

func (f *floor) save() error { return writeJSON(f.checkpoint, f.prepared) }

// writeJSON writes value to path atomically: a temporary file, fsync, rename.
func writeJSON(path string, value any) error {
	data, err := json.Marshal(value)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func main() {
	klog.InitFlags(nil) // -v=N for the helper's own log lines
	flag.Parse()
	if err := run(); err != nil {
		klog.ErrorS(err, "dra-floor failed")
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	node, uid := os.Getenv("NODE_NAME"), types.UID(os.Getenv("POD_UID"))
	count, err := strconv.Atoi(getenv("DEVICES", "8"))
	if err != nil {
		return fmt.Errorf("DEVICES: %w", err)
	}
	config, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	dataDir := filepath.Join("/var/lib/kubelet/plugins", driverName)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return err
	}
	f := &floor{
		cdiDir:     getenv("CDI_DIR", "/var/run/cdi"),
		checkpoint: filepath.Join(dataDir, "checkpoint.json"),
		prepared:   map[types.UID][]string{},
	}
	klog.InfoS("dra-floor starting", "driver", driverName, "node", node)
	helper, err := kubeletplugin.Start(ctx, f,
		kubeletplugin.DriverName(driverName), kubeletplugin.NodeName(node),
		kubeletplugin.KubeClient(client), kubeletplugin.RollingUpdate(uid))
	if err != nil {
		return err
	}
	defer helper.Stop()
	klog.InfoS("dra-floor registered; publishing its devices")
	devices := make([]resourceapi.Device, count)
	for i := range devices {
		devices[i] = resourceapi.Device{Name: fmt.Sprintf("dev-%d", i)}
	}
	resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		node: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}
	if err := helper.PublishResources(ctx, resources); err != nil {
		return err
	}
	klog.InfoS("dra-floor serving", "driver", driverName, "node", node, "devices", count)
	<-ctx.Done()
	return nil
}

func getenv(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}
