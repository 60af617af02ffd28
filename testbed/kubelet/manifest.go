package kubelet

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// Annotation names the kubelet sets on static and mirror pods
// (k8s.io/kubernetes pkg/kubelet/types/pod_update.go).
const (
	ConfigSourceAnnotation = "kubernetes.io/config.source"
	ConfigMirrorAnnotation = "kubernetes.io/config.mirror"
	ConfigSeenAnnotation   = "kubernetes.io/config.seen"
	ConfigHashAnnotation   = "kubernetes.io/config.hash"
	// FileSource is config.source for a pod read from the static pod path.
	FileSource = "file"
)

// StaticPod is one manifest of the static pod path, defaulted the way the
// real kubelet defaults a file pod (pkg/kubelet/config/common.go
// applyDefaults): UID and config.hash the hash of the manifest, name
// <name>-<node>, namespace "default" if unset, spec.nodeName the node.
type StaticPod struct {
	File string
	Hash string
	Pod  *corev1.Pod
}

// FullName is namespace/name, the pod's key.
func (s StaticPod) FullName() string { return s.Pod.Namespace + "/" + s.Pod.Name }

// ParseStaticPod decodes a manifest (YAML or JSON) read from file for
// node. The hash covers the pod as written plus the node and the file,
// as the real kubelet's applyDefaults does (it hashes the decoded object
// with DeepHashObject; this hashes its canonical JSON with MD5, so the
// value differs from the real kubelet's but, like it, changes when and
// only when the manifest's content, the node or the file does).
func ParseStaticPod(data []byte, file, node string) (StaticPod, error) {
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return StaticPod{}, fmt.Errorf("static pod %s: %w", file, err)
	}
	if pod.Kind != "" && pod.Kind != "Pod" {
		return StaticPod{}, fmt.Errorf("static pod %s: kind %q, want Pod", file, pod.Kind)
	}
	if pod.Name == "" {
		return StaticPod{}, fmt.Errorf("static pod %s: no metadata.name", file)
	}
	if len(pod.Spec.Containers) == 0 {
		return StaticPod{}, fmt.Errorf("static pod %s: no containers", file)
	}
	canon, err := json.Marshal(&pod) // struct fields in order, map keys sorted
	if err != nil {
		return StaticPod{}, fmt.Errorf("static pod %s: %w", file, err)
	}
	h := md5.New()
	h.Write(canon)
	fmt.Fprintf(h, "host:%s", node)
	fmt.Fprintf(h, "file:%s", file)
	hash := hex.EncodeToString(h.Sum(nil))

	pod.UID = types.UID(hash)
	pod.Name = pod.Name + "-" + strings.ToLower(node) // generatePodName
	if pod.Namespace == "" {
		pod.Namespace = "default"
	}
	pod.Spec.NodeName = node
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[ConfigHashAnnotation] = hash
	pod.Annotations[ConfigSourceAnnotation] = FileSource
	// File pods tolerate every NoExecute taint (applyDefaults).
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
	return StaticPod{File: file, Hash: hash, Pod: &pod}, nil
}

// ReadStaticPods reads every manifest in dir as the real kubelet's file
// source does (pkg/kubelet/config/file.go): regular files, names starting
// with "." skipped; a file that does not parse is reported in bad and
// skipped. A missing dir is no pods.
func ReadStaticPods(dir, node string) (pods []StaticPod, bad map[string]error, err error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("static pod path: %w", err)
	}
	seen := map[string]string{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			continue
		}
		file := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(file)
		if err != nil {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[file] = err
			continue
		}
		sp, err := ParseStaticPod(data, file, node)
		if err == nil {
			if other, dup := seen[sp.FullName()]; dup {
				err = fmt.Errorf("static pod %s: pod %s already defined by %s", file, sp.FullName(), other)
			}
		}
		if err != nil {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[file] = err
			continue
		}
		seen[sp.FullName()] = file
		pods = append(pods, sp)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].FullName() < pods[j].FullName() })
	return pods, bad, nil
}
