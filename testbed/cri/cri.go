// Package cri is the test bed's container runtime endpoint: the part of
// the CRI (k8s.io/cri-api runtime.v1) that kubeadm calls, served on a
// host's unix socket (containerd's path, so kubeadm's DetectCRISocket
// finds it as on a real master), over pods that are processes.
//
// kubeadm v1.33/v1.34 use the runtime through
// cmd/kubeadm/app/util/runtime (CRIRuntime), and nothing else:
//   - Version and ImageFsInfo, when it connects (k8s.io/cri-client
//     validates each service);
//   - Status: preflight's CRI check (IsRunning: the RuntimeReady
//     condition) and its sandbox-image check (SandboxImage: Info["config"]'s
//     sandboxImage, verbose);
//   - ImageStatus and PullImage: preflight's ImagePull check (ImageExists,
//     PullImagesInParallel) of `kubeadm init`, `join` and `upgrade apply`;
//   - ListPodSandbox, StopPodSandbox, RemovePodSandbox: `kubeadm reset`'s
//     cleanup-node phase (ListKubeContainers, RemoveContainers).
//
// Every other call answers codes.Unimplemented. An image is present when
// Images resolves it to something the host can run (the test bed's built
// binaries): pulling one it cannot resolve fails as a registry without
// that tag does, so a version that cannot run is refused by kubeadm's
// own preflight, as on a real master.
package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultSocket is containerd's socket, the first kubeadm looks for
// (cmd/kubeadm/app/constants DefaultCRISocket).
const DefaultSocket = "/var/run/containerd/containerd.sock"

// Pod is one running pod as the runtime lists it.
type Pod struct {
	// ID is the sandbox ID kubeadm passes back to Stop and Remove.
	ID        string
	Name      string
	Namespace string
	UID       string
	Ready     bool
	// CreatedAt is in nanoseconds since the epoch.
	CreatedAt int64
	Labels    map[string]string
}

// Pods is what runs on the host: the test bed's kubelet.
type Pods interface {
	List() []Pod
	// Stop stops the pod's processes; an unknown ID is not an error
	// (CRI: StopPodSandbox is idempotent).
	Stop(ctx context.Context, id string) error
	// Remove forgets the pod (stopping it first); unknown is not an
	// error.
	Remove(ctx context.Context, id string) error
}

// Images says which images the host can run.
type Images interface {
	// Resolve reports whether image (registry.k8s.io/kube-apiserver:v1.33.13)
	// can run here, its size in bytes (the binary's), or why not.
	Resolve(image string) (size uint64, err error)
}

// Config is a runtime endpoint's configuration.
type Config struct {
	// Socket is the unix socket path (DefaultSocket).
	Socket string
	// SandboxImage is what Status reports as the runtime's sandbox
	// image (kubeadm's preflight warns when it differs from its own).
	SandboxImage string
	Pods         Pods
	Images       Images
	Log          *slog.Logger
}

// Server is a running runtime endpoint.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	cfg    Config
	grpc   *grpc.Server
	lis    net.Listener
	done   chan struct{}
	mu     sync.Mutex
	pulled map[string]uint64 // image → size
}

// Listen starts serving on cfg.Socket (replacing a stale socket file)
// until Close.
func Listen(cfg Config) (*Server, error) {
	if cfg.Socket == "" {
		cfg.Socket = DefaultSocket
	}
	if cfg.Pods == nil || cfg.Images == nil {
		return nil, errors.New("cri: Pods and Images are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o755); err != nil {
		return nil, fmt.Errorf("cri: socket directory: %w", err)
	}
	if err := os.Remove(cfg.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cri: remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", cfg.Socket)
	if err != nil {
		return nil, fmt.Errorf("cri: listen on %s: %w", cfg.Socket, err)
	}
	s := &Server{cfg: cfg, grpc: grpc.NewServer(), lis: lis, done: make(chan struct{}), pulled: map[string]uint64{}}
	runtimeapi.RegisterRuntimeServiceServer(s.grpc, s)
	runtimeapi.RegisterImageServiceServer(s.grpc, s)
	go func() {
		defer close(s.done)
		if err := s.grpc.Serve(lis); err != nil {
			cfg.Log.Warn("cri: serve", "err", err)
		}
	}()
	return s, nil
}

// Close stops serving and removes the socket.
func (s *Server) Close() error {
	s.grpc.Stop()
	<-s.done
	if err := os.Remove(s.cfg.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cri: remove socket: %w", err)
	}
	return nil
}

// Version implements runtimeapi.RuntimeServiceServer.
func (s *Server) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "hamaster-testbed", RuntimeVersion: "v0.1.0", RuntimeApiVersion: "v1"}, nil
}

// Status implements runtimeapi.RuntimeServiceServer: ready, and, when
// verbose, the sandbox image in Info["config"] as containerd reports it.
func (s *Server) Status(_ context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	resp := &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}}
	if req.GetVerbose() && s.cfg.SandboxImage != "" {
		b, err := json.Marshal(struct {
			SandboxImage string `json:"sandboxImage"`
		}{s.cfg.SandboxImage})
		if err != nil {
			return nil, status.Errorf(codes.Internal, "status info: %v", err)
		}
		resp.Info = map[string]string{"config": string(b)}
	}
	return resp, nil
}

// ListPodSandbox implements runtimeapi.RuntimeServiceServer.
func (s *Server) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f := req.GetFilter()
	var out []*runtimeapi.PodSandbox
	for _, p := range s.cfg.Pods.List() {
		state := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		if p.Ready {
			state = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		if f != nil {
			if f.GetId() != "" && f.GetId() != p.ID {
				continue
			}
			if f.GetState() != nil && f.GetState().GetState() != state {
				continue
			}
			if !matchLabels(f.GetLabelSelector(), p.Labels) {
				continue
			}
		}
		out = append(out, &runtimeapi.PodSandbox{
			Id:        p.ID,
			Metadata:  &runtimeapi.PodSandboxMetadata{Name: p.Name, Namespace: p.Namespace, Uid: p.UID},
			State:     state,
			CreatedAt: p.CreatedAt,
			Labels:    p.Labels,
		})
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

func matchLabels(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// StopPodSandbox implements runtimeapi.RuntimeServiceServer.
func (s *Server) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	if err := s.cfg.Pods.Stop(ctx, req.GetPodSandboxId()); err != nil {
		return nil, status.Errorf(codes.Internal, "stop pod %s: %v", req.GetPodSandboxId(), err)
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox implements runtimeapi.RuntimeServiceServer.
func (s *Server) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	if err := s.cfg.Pods.Remove(ctx, req.GetPodSandboxId()); err != nil {
		return nil, status.Errorf(codes.Internal, "remove pod %s: %v", req.GetPodSandboxId(), err)
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// ImageStatus implements runtimeapi.ImageServiceServer: an image is
// present once pulled (kubeadm's ImageExists then skips the pull).
func (s *Server) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	ref := req.GetImage().GetImage()
	s.mu.Lock()
	defer s.mu.Unlock()
	size, ok := s.pulled[ref]
	if !ok {
		return &runtimeapi.ImageStatusResponse{}, nil // CRI: absent is a nil image, not an error
	}
	return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: ref, RepoTags: []string{ref}, Size: size, Spec: req.GetImage()}}, nil
}

// PullImage implements runtimeapi.ImageServiceServer: the image must be
// one the host can run (Images.Resolve), else NotFound, as a registry
// without the tag answers.
func (s *Server) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref := req.GetImage().GetImage()
	size, err := s.cfg.Images.Resolve(ref)
	if err != nil {
		s.cfg.Log.Info("cri: pull refused", "image", ref, "err", err)
		return nil, status.Errorf(codes.NotFound, "pull %s: %v", ref, err)
	}
	s.mu.Lock()
	s.pulled[ref] = size
	s.mu.Unlock()
	return &runtimeapi.PullImageResponse{ImageRef: ref}, nil
}

// ImageFsInfo implements runtimeapi.ImageServiceServer: no filesystem
// to report (the CRI client calls it to validate the endpoint).
func (s *Server) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

// ListImages implements runtimeapi.ImageServiceServer.
func (s *Server) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*runtimeapi.Image
	for ref, size := range s.pulled {
		out = append(out, &runtimeapi.Image{Id: ref, RepoTags: []string{ref}, Size: size})
	}
	return &runtimeapi.ListImagesResponse{Images: out}, nil
}
