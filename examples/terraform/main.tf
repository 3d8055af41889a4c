# A function from a directory, called over HTTP and every night, and run
# once as a job. With `sless dev` running (it prints the settings):
#
#   export TF_CLI_CONFIG_FILE=$PWD/.sless/terraform.rc   # the provider, built by ./scripts/dev
#   export SLESS_ENDPOINT=http://127.0.0.1:8080 SLESS_TOKEN=<the token sless dev printed>
#   terraform -chdir=examples/terraform apply
#
# docs/terraform.md says more.

terraform {
  required_providers {
    sless = {
      source = "sless.dev/sless/sless"
    }
  }
}

# endpoint and token default to SLESS_ENDPOINT and SLESS_TOKEN.
provider "sless" {}

resource "sless_function" "greeter" {
  name       = "greeter"
  runtime    = "python3.11"
  entrypoint = "handler.handle"
  # Packed as `sless deploy` packs it: editing a file changes code_hash,
  # and the plan shows it.
  source_dir  = "${path.module}/greeter"
  memory_mb   = 128
  timeout_sec = 10
  # Scaled out to at most 3 instances, each taking 10 calls at once; with
  # min_instances unset (0) it scales to zero when idle.
  max_instances = 3
  concurrency   = 10
  env_vars = {
    GREETING = "hello"
  }
}

resource "sless_trigger" "web" {
  name     = "greeter-web"
  function = sless_function.greeter.name
  type     = "http"
}

resource "sless_trigger" "nightly" {
  name     = "greeter-nightly"
  function = sless_function.greeter.name
  type     = "cron"
  schedule = "0 3 * * *"
  timezone = "Europe/Paris"
}

resource "sless_job" "hello" {
  name     = "greeter-hello"
  function = sless_function.greeter.name
  input    = jsonencode({ name = "terraform" })
}

output "url" {
  value = sless_function.greeter.url
}

output "job_output" {
  value = sless_job.hello.output
}
