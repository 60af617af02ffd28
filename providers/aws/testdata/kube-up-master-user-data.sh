#! /bin/bash
mkdir -p /var/cache/kubernetes-install
cd /var/cache/kubernetes-install

cat > kube_env.yaml << __EOF_MASTER_KUBE_ENV_YAML
@KUBE_ENV@
AUTO_UPGRADE: 'true'
DOCKER_STORAGE: 'aufs'
API_SERVERS: '@MASTER_INTERNAL_IP@'
MASTER_EIP: '@MASTER_IP@'
__EOF_MASTER_KUBE_ENV_YAML

wget -O bootstrap https://kubernetes-staging.example.test/devel/bootstrap-script
chmod +x bootstrap
mkdir -p /etc/kubernetes
mv kube_env.yaml /etc/kubernetes
mv bootstrap /etc/kubernetes/
cat > /etc/rc.local << EOF_RC_LOCAL
#!/bin/sh -e
/etc/kubernetes/bootstrap
exit 0
EOF_RC_LOCAL
/etc/kubernetes/bootstrap
