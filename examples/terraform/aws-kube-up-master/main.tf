# Master 0 in kube-up's AWS format (kubernetes cluster/aws/util.sh
# start-master, up to v1.8), the format hamaster's aws provider works on:
# its user data is a gzip-compressed `#! /bin/bash` script that writes
# kube_env.yaml from a heredoc ending __EOF_MASTER_KUBE_ENV_YAML, with
# MASTER_EIP and API_SERVERS. hamaster add-replica clones it (see the main
# README, "AWS: the kube-up contract").

locals {
  master   = var.master_name != "" ? var.master_name : "${var.cluster}-master"
  hostname = "ip-${replace(var.master_private_ip, ".", "-")}" # EC2's: the etcd member's host
  tags = {
    "hamaster.io/cluster"                  = var.cluster
    "KubernetesCluster"                    = var.cluster
    "kubernetes.io/cluster/${var.cluster}" = "owned"
  }
  kube_env = merge(var.kube_env, {
    INITIAL_ETCD_CLUSTER = local.hostname
    AUTO_UPGRADE         = "true"
    API_SERVERS          = var.master_private_ip
    MASTER_EIP           = aws_eip.master.public_ip
  })
}

data "aws_subnet" "master" {
  id = var.subnet_id
}

data "aws_region" "current" {}

data "aws_vpc" "master" {
  id = data.aws_subnet.master.vpc_id
}

resource "aws_security_group" "master" {
  name        = "${local.master}-sg"
  description = "kube-up master: apiserver, etcd peers, ssh"
  vpc_id      = data.aws_vpc.master.id
  tags        = local.tags

  ingress {
    description = "apiserver: clients (an NLB keeps their address)"
    protocol    = "tcp"
    from_port   = 443
    to_port     = 443
    cidr_blocks = var.client_cidrs
  }
  ingress {
    description = "apiserver: NLB health checks, from its private addresses in the VPC"
    protocol    = "tcp"
    from_port   = 443
    to_port     = 443
    cidr_blocks = [data.aws_vpc.master.cidr_block]
  }
  ingress {
    description = "etcd peers (main 2380, events 2381) between masters"
    protocol    = "tcp"
    from_port   = 2380
    to_port     = 2381
    self        = true
  }
  ingress {
    description = "ssh: hamaster tunnels to etcd on the master's 127.0.0.1"
    protocol    = "tcp"
    from_port   = 22
    to_port     = 22
    cidr_blocks = var.ssh_cidrs
  }
  egress {
    protocol    = "-1"
    from_port   = 0
    to_port     = 0
    cidr_blocks = ["0.0.0.0/0"]
  }
}

# The cluster's Elastic IP (kube-up: ensure-master-ip). hamaster finds it
# by its hamaster.io/cluster tag.
resource "aws_eip" "master" {
  domain = "vpc"
  tags   = merge(local.tags, { Name = "${local.master}-ip" })
}

# The master's data volume (kube-up: ensure-master-pd, <master>-pd).
resource "aws_ebs_volume" "master_pd" {
  availability_zone = data.aws_subnet.master.availability_zone
  size              = var.data_volume.size
  type              = var.data_volume.type
  iops              = var.data_volume.iops
  throughput        = var.data_volume.throughput
  encrypted         = true
  kms_key_id        = var.data_volume.kms_key_id
  tags = merge(local.tags, {
    Name                  = "${local.master}-pd"
    "hamaster.io/replica" = local.master
    "hamaster.io/role"    = "data"
  })
}

resource "aws_instance" "master" {
  ami                    = var.ami
  instance_type          = var.instance_type
  subnet_id              = var.subnet_id
  private_ip             = var.master_private_ip
  vpc_security_group_ids = [aws_security_group.master.id]
  key_name               = var.key_name
  iam_instance_profile   = var.iam_instance_profile != "" ? var.iam_instance_profile : null
  ebs_optimized          = true
  source_dest_check      = false # kube-up turns it off on the master (pod routes)

  user_data_base64 = base64gzip(templatefile("${path.module}/master-user-data.sh.tftpl", {
    env       = local.kube_env
    bootstrap = var.bootstrap
  }))

  metadata_options {
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
    http_endpoint               = "enabled"
  }

  root_block_device {
    volume_size = var.root_volume.size
    volume_type = var.root_volume.type
    iops        = var.root_volume.iops
    throughput  = var.root_volume.throughput
    encrypted   = true
    kms_key_id  = var.root_volume.kms_key_id
  }

  tags = merge(local.tags, {
    Name = local.master
    Role = "${var.cluster}-master"
  })
  volume_tags = local.tags

  lifecycle {
    # hamaster may recreate replicas (rolling-upgrade); master 0's user
    # data is the source it clones: change it through hamaster, not here.
    ignore_changes = [user_data_base64]
  }
}

resource "aws_volume_attachment" "master_pd" {
  device_name = "/dev/xvdb"
  volume_id   = aws_ebs_volume.master_pd.id
  instance_id = aws_instance.master.id
}

resource "aws_eip_association" "master" {
  allocation_id = aws_eip.master.id
  instance_id   = aws_instance.master.id
}
