"""`compare_summary`: one table comparing the PyTorch, ChainerMN and parameter-server runs."""

from kfp import dsl
from kfp.dsl import HTML, Input, Markdown, Metrics, Model, Output

from kubetrain.components._shared import LAUNCHER_IMAGE


# KFP's decorator is untyped; the component body runs from its source in the launcher image.
@dsl.component(base_image=LAUNCHER_IMAGE, install_kfp_package=False)  # type: ignore[untyped-decorator]
def compare_summary(
    pytorch_model: Input[Model],
    pytorch_metrics: Input[Metrics],
    chainermn_model: Input[Model],
    chainermn_metrics: Input[Metrics],
    ps_model: Input[Model],
    ps_metrics: Input[Metrics],
    summary: Output[Markdown],
    summary_html: Output[HTML],
) -> str:
    """Compare three training runs in one table (accuracy, loss, throughput, time, job).

    Args:
        pytorch_model: Model output of pytorch_train.
        pytorch_metrics: Metrics output of pytorch_train.
        chainermn_model: Model output of chainermn_train.
        chainermn_metrics: Metrics output of chainermn_train.
        ps_model: Model output of ps_train.
        ps_metrics: Metrics output of ps_train.
    Returns:
        summary: The comparison as a Markdown table.
        summary_html: The comparison as an HTML page.
        Output: The framework with the highest test accuracy.
    """
    from kubetrain.kfp_runtime.summary import compare_step

    return compare_step(
        runs=[
            ("pytorch", pytorch_model, pytorch_metrics),
            ("chainermn", chainermn_model, chainermn_metrics),
            ("ps", ps_model, ps_metrics),
        ],
        summary_markdown=summary,
        summary_html=summary_html,
    )
