rule fig06_roofline:
    input:
        table="results/costmodel/roofline_points.csv",
    output:
        pdf=report(
            "figures/fig06_roofline.pdf",
            caption="../report/fig06_roofline.rst",
            category="Cost model",
        ),
        png="figures/fig06_roofline.png",
        csv="results/figures/fig06_roofline.csv",
    params:
        name="fig06_roofline",
        basedir=BASEDIR,
    script:
        "../scripts/figure.py"


rule validation_gpu:
    input:
        table="results/costmodel/validation.csv",
    output:
        pdf=report(
            "figures/validation_gpu.pdf",
            caption="../report/validation_gpu.rst",
            category="Cost model",
        ),
        png="figures/validation_gpu.png",
        csv="results/figures/validation_gpu.csv",
    params:
        name="validation_gpu",
        basedir=BASEDIR,
    script:
        "../scripts/figure.py"
