terraform {
  # check blocks need Terraform 1.5.
  required_version = ">= 1.5.0"

  required_providers {
    external = {
      source = "hashicorp/external"
      # Any 2.3.x or later 2.x (tested with 2.3.5). A 3.0 may change the
      # protocol: sending null query values is the known breaking change
      # (hashicorp/terraform-provider-external#209).
      version = "~> 2.3"
    }
  }
}
