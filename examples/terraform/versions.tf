terraform {
  # check blocks need Terraform 1.5.
  required_version = ">= 1.5.0"

  required_providers {
    external = {
      source = "hashicorp/external"
      # 2.3.2 is the first 2.x that leaves null query values out instead of
      # sending "" or refusing them; the protocol is unchanged within 2.x.
      version = ">= 2.3.2, < 3.0.0"
    }
  }
}
