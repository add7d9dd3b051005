# One rule per registry table (adsl.figures.registry.TABLES and the configured extensions'): it runs
# adsl.workflow.table, which calls the table's function with its named inputs, the configuration
# sections it reads and its fixed options.
for spec in REG.tables.values():

    rule:
        name:
            f"table_{spec.name}"
        input:
            # a function, so a missing profile stops only runs that need this table
            unpack(
                lambda wc, spec=spec: {
                    **catalogue_inputs(spec.reads),
                    **spec.inputs(SETTINGS, profile_checked),
                }
            ),
        output:
            csv=spec.path,
        log:
            f"logs/tables/{spec.name}.log",
        group:
            "tables"
        conda:
            "../envs/adsl.yaml"
        resources:
            mem_mb=2000,
            runtime=10,
            cpus_per_task=1,
        params:
            table=spec.name,
            settings=sections(spec.reads),
            options=dict(spec.options),
            extensions=config["extensions"],
        script:
            "../scripts/table.py"
