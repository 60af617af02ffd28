variable "cluster" {
  description = "hamaster cluster name (\"\" = hamaster's --cluster / HAMASTER_CLUSTER)."
  type        = string
  default     = ""
}

variable "hamaster_provider" {
  description = "Where the masters run: local | gce | aws (\"\" = HAMASTER_PROVIDER, else local). Only local is built today."
  type        = string
  default     = ""
}

variable "state_dir" {
  description = "hamaster's state dir: journals, snapshots, CA (\"\" = HAMASTER_STATE_DIR, else ~/.local/state/hamaster)."
  type        = string
  default     = ""
}

variable "provider_settings" {
  description = "The provider's settings by their flag names, passed through in the query: gce-project, gce-region, aws-region, metal-inventory, ssh-key..."
  type        = map(string)
  default     = {}
}

variable "next_replica_name" {
  description = "Pin the next replica's name (\"\" = hamaster's deterministic <cluster>-master-<3 hex>)."
  type        = string
  default     = ""
}

variable "next_replica_address" {
  description = "Internal IP reserved for the next replica (for example a google_compute_address). Only with it does etcd_initial_cluster include the new replica itself."
  type        = string
  default     = ""
}

variable "hamaster_binary" {
  description = "The hamaster executable: a name on $PATH or an absolute path."
  type        = string
  default     = "hamaster"
}
