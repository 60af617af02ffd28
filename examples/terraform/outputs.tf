output "endpoint" {
  description = "The apiserver endpoint clients use: the static IP, or the DNS name when one is set."
  value       = "https://${local.hm.endpoint}:6443"
}

output "endpoint_kind" {
  description = "ip (static IP on the single master), lb (L4 load balancer) or dns."
  value       = local.hm.endpoint_kind
}

output "replicas" {
  description = "Replica name => internal address."
  value       = local.replica_addresses
}

output "replica_count" {
  value = tonumber(local.hm.replica_count)
}

output "leader" {
  description = "The replica whose etcd member leads."
  value       = local.hm.leader
}

output "healthy" {
  value = local.hm.healthy == "true"
}

output "etcd_members" {
  description = "etcd member name => peer URL."
  value       = local.etcd_members
}

output "ca_cert_sha256" {
  description = "SHA-256 of the cluster CA certificate's DER (as openssl x509 -fingerprint -sha256 prints it, without colons)."
  value       = local.hm.ca_cert_sha256
}

output "cert_expiry" {
  description = "Earliest expiry (RFC 3339) of the replicas' apiserver certificates."
  value       = local.hm.cert_expiry
}

output "versions" {
  value = compact(split(",", local.hm.versions))
}

output "next_replica" {
  description = <<-EOT
    What the next replica needs. name: pass it to 'hamaster add-replica --name'
    or use it as the VM name. metadata: the etcd part of its kube-env, only
    when next_replica_address was given (null otherwise: append
    "<name>=https://<its IP>:2380" to etcd_initial_cluster yourself).
  EOT
  value = {
    name     = local.hm.next_replica_name
    peer_url = local.hm.next_replica_peer_url
    metadata = local.next_replica_complete ? {
      INITIAL_ETCD_CLUSTER       = local.hm.etcd_initial_cluster
      ETCD_INITIAL_CLUSTER_STATE = local.hm.etcd_initial_cluster_state
    } : null
    add_replica_command = "hamaster --cluster ${local.hm.cluster} add-replica --name ${local.hm.next_replica_name} --yes"
  }
}
