# Reads the HA state of a hamaster cluster. Read-only: hamaster changes
# nothing and takes no lock; Terraform re-runs it on every refresh.
data "external" "hamaster" {
  program = [var.hamaster_binary, "terraform"]

  # Every value is a string. "" means "not set": hamaster falls back to its
  # own flags/environment, so the empty ones may as well be sent.
  query = merge(var.provider_settings, {
    cluster              = var.cluster
    provider             = var.hamaster_provider
    state_dir            = var.state_dir
    next_replica_name    = var.next_replica_name
    next_replica_address = var.next_replica_address
  })
}

locals {
  hm = data.external.hamaster.result

  # Lists come comma-separated; split("", ",") would give [""].
  replicas = compact(split(",", local.hm.replicas))
  replica_addresses = {
    for pair in compact(split(",", local.hm.replica_map)) :
    split("=", pair)[0] => split("=", pair)[1]
  }
  etcd_members = {
    for pair in compact(split(",", local.hm.etcd_initial_cluster_existing)) :
    split("=", pair)[0] => split("=", pair)[1]
  }

  # etcd_initial_cluster includes the new replica only when its address was
  # given (next_replica_peer_url is set); otherwise there is no complete
  # value to hand out.
  next_replica_complete = local.hm.next_replica_peer_url != ""
}

# A warning (not an error) on plan/apply when the cluster is not healthy.
check "hamaster_cluster_healthy" {
  assert {
    condition     = local.hm.healthy == "true"
    error_message = "hamaster cluster ${local.hm.cluster} is not healthy (see 'hamaster status'); do not add a replica now."
  }
}
