output "master_name" {
  description = "Master 0's Name tag (hamaster's replica name)."
  value       = local.master
}

output "master_hostname" {
  description = "Master 0's EC2 hostname: its etcd members are etcd-<hostname> and etcd-<hostname>-events."
  value       = local.hostname
}

output "elastic_ip" {
  description = "The cluster's Elastic IP (MASTER_EIP): master 0's public address, and where hamaster SSHes to reach etcd."
  value       = aws_eip.master.public_ip
}

output "security_group_id" {
  value = aws_security_group.master.id
}

output "hamaster_flags" {
  description = "Flags for hamaster commands on this cluster (add --ssh-key and --ssh-known-hosts)."
  value       = "--provider aws --cluster ${var.cluster} --aws-region ${data.aws_region.current.name} --ssh-user <login> --aws-client-cidrs ${join(",", var.client_cidrs)}"
}
