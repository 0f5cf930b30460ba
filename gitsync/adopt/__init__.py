"""Adoption: ways into a config repo from what a team already runs.

One module per job: `export` (a live gateway → a repo), `import_adc` (ADC's
declarative files → a payload), with `adc_shapes` (the types of ADC's fields, checked
before a file is converted), `adc_releases` (what each ADC release writes) and
`adc_gateway` (which one wrote a live gateway), `import_apisix_yaml` (a
file-driven ``apisix.yaml`` → a payload), `importing` (the ``gitsync import`` command
over both), `init` (a scaffold), `schema_export` (JSON Schema for editors) and
`completion` (shell completion). `repo_writer` writes a payload as repo files for all of them;
`secret_fields` and `sops_writer` keep secret values out of those files;
`arguments` holds each command's own flags, light enough for cli to read at every
start. They use render's, reconcile's, the schemas' and the gateway client's
public surface only.
"""
