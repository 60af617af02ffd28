// Package kubeadm is the flavor of masters built by kubeadm:
// stacked etcd, static pods under /etc/kubernetes/manifests, the cluster
// CA and its keys under /etc/kubernetes/pki, the cluster's configuration
// in kube-system/kubeadm-config. hamaster drives the real kubeadm on the
// masters over SSH, as an operator would, and does itself only what
// kubeadm leaves to the operator:
//   - a new master joins with `kubeadm join --control-plane` (Join): a
//     bootstrap token and certificate key hamaster makes (NewToken,
//     NewCertificateKey) and gives to `kubeadm token create` and `kubeadm
//     init phase upload-certs --certificate-key` on a healthy master, and
//     the CA pinned by its hash (CACertHash);
//   - converting a single master to HA (kubeadm#1955: kubeadm has no
//     command to change controlPlaneEndpoint; flavors.EndpointMover):
//     each master's apiserver certificate reissued by `kubeadm init
//     phase certs apiserver` into a staging directory (kubeadm keeps an
//     existing pair), checked to keep every old name, then renamed over
//     the old pair, which the running apiserver reloads
//     (AddServingSANs); kubeadm-config's ClusterConfiguration
//     (SetControlPlaneEndpoint) and cluster-info rewritten
//     (SetEndpoint); kube-proxy's kubeconfig moved in its ConfigMap,
//     kubeadm's signature renewed, and its DaemonSet rolled once
//     (PointConsumers: EditKubeProxyConfigMap, ConfigMapChecksum,
//     KubeProxyState.RollLeft); the kubeconfigs that point at the
//     endpoint moved (PointMaster: EndpointKubeconfigs, KubeconfigMoves,
//     SetKubeconfigServer); ConversionLeft says what is left on a master;
//   - naming what still points at one master's own address where the
//     endpoint should be (flavors.PinFinder: Pinned, FindPins), for
//     status and for remove-replica's refusal;
//   - upgrading a master in place (UpgradeMaster: kubeadm upgrade apply
//     on the first master, kubeadm upgrade node on the others) with a
//     backup saved first and restored whole by RollbackMaster, and kubeadm
//     stopped within seconds when the new kube-apiserver cannot start,
//     where kubeadm itself waits 5 minutes and reverts one component
//     (kubeadm#2927, #2061).
//
// The pure parts are checked against the real kubeadm of every pinned
// version (testdata/README.md, realkubeadm_test.go), the flavor on the
// test bed's kubeadm masters (lab_test.go, convert_lab_test.go: build
// tag metallab).
package kubeadm
