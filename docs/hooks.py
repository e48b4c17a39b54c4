"""mkdocs hook: the pages link figures as ``../figures/x.png`` (so they render on GitHub from
``docs/``); the site gets the repository's ``figures/`` folder and the links point into it."""

from pathlib import Path

from mkdocs.structure.files import File

FIGURES = Path(__file__).resolve().parents[1] / "figures"


def on_files(files, config):
    for png in sorted(FIGURES.glob("*.png")):
        files.append(File(f"figures/{png.name}", str(FIGURES.parent), config["site_dir"],
                          config["use_directory_urls"]))
    return files


def on_page_markdown(markdown, page, config, files):
    return markdown.replace("](../figures/", "](figures/")
