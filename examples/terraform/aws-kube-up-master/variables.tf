variable "cluster" {
  description = "hamaster's --cluster: tagged hamaster.io/cluster on the master, its data volume and the Elastic IP (how hamaster finds them) and KubernetesCluster as kube-up tags them."
  type        = string
}

variable "master_name" {
  description = "The master's Name tag (kube-up: <INSTANCE_PREFIX>-master). Replicas hamaster adds are named by the operator (--name)."
  type        = string
  default     = ""
}

variable "subnet_id" {
  description = "The master's subnet (its zone is the master's zone; the NLB hamaster creates later gets the Elastic IP in this subnet's mapping)."
  type        = string
}

variable "master_private_ip" {
  description = "The master's private address in subnet_id. Its EC2 hostname, ip-a-b-c-d, is the etcd member's host (INITIAL_ETCD_CLUSTER)."
  type        = string
}

variable "ami" {
  description = "An AMI whose boot runs user data scripts (cloud-init) and whose bootstrap reads /var/cache/kubernetes-install/kube_env.yaml."
  type        = string
}

variable "instance_type" {
  type    = string
  default = "t3.large"
}

variable "key_name" {
  description = "EC2 key pair: hamaster reaches etcd over SSH (--ssh-user/--ssh-key), to the master's public address or through --aws-ssh-bastion."
  type        = string
}

variable "iam_instance_profile" {
  description = "Instance profile name (kube-up: kubernetes-master). \"\" for none."
  type        = string
  default     = ""
}

variable "root_volume" {
  description = "Root volume: copied to every replica hamaster adds."
  type = object({
    size       = number
    type       = string
    iops       = optional(number)
    throughput = optional(number)
    kms_key_id = optional(string)
  })
  default = { size = 32, type = "gp3" }
}

variable "data_volume" {
  description = "The master's data volume (kube-up: <master>-pd, etcd's data): copied, fresh, for every replica."
  type = object({
    size       = number
    type       = string
    iops       = optional(number)
    throughput = optional(number)
    kms_key_id = optional(string)
  })
  default = { size = 20, type = "gp3" }
}

variable "client_cidrs" {
  description = "Where clients reach the apiserver from (hamaster's --aws-client-cidrs): an NLB keeps the client's address, so the masters' security group must let them in."
  type        = list(string)
  default     = ["0.0.0.0/0"]
}

variable "ssh_cidrs" {
  description = "Where hamaster's operator (or the bastion) connects to sshd from."
  type        = list(string)
}

variable "kube_env" {
  description = "The rest of kube-up's write-master-env kube-env (certificates included: AWS has no kube-master-certs): ETCD_CA_CERT/KEY, ETCD_PEER_CERT/KEY, ETCD_APISERVER_*, CA_CERT, MASTER_CERT/KEY… as kube-up encodes them. INITIAL_ETCD_CLUSTER, API_SERVERS and MASTER_EIP are set by this module."
  type        = map(string)
  sensitive   = true
  validation {
    # The heredoc's delimiter is unquoted: bash would expand these at boot,
    # and hamaster refuses to clone such a master.
    condition     = alltrue([for v in values(var.kube_env) : length(regexall("[$`\\\\]", v)) == 0 && !strcontains(v, "__EOF_MASTER_KUBE_ENV_YAML")])
    error_message = "kube_env values must not contain $, `, \\ or __EOF_MASTER_KUBE_ENV_YAML (bash expands them in the unquoted kube_env.yaml heredoc)."
  }
}

variable "bootstrap" {
  description = "What runs after kube_env.yaml is written (kube-up: download the bootstrap script and run it, also from rc.local). Kept verbatim in every replica's user data."
  type        = string
  default     = <<-EOT
    mkdir -p /etc/kubernetes
    mv kube_env.yaml /etc/kubernetes/
    # your bootstrap here: it reads /etc/kubernetes/kube_env.yaml
  EOT
}
