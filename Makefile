# The README's two commands: `make demo` and `make test`. Both set up everything on a
# fresh machine: a virtualenv, the package, a Docker daemon, the base image.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
HANGAR  := $(VENV)/bin/hangar
BASE_IMAGE ?= hangar/base:bookworm
EXTRAS  ?= dev,s3,postgres,k8s,swebench,clouds

.PHONY: demo test check docs fmt venv bytecode docker services base-image helm harbor clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# A virtualenv made before grafana-client was pinned below 4 has urllib3-future in
	# urllib3's place (see pyproject.toml): take both out so urllib3 comes back whole.
	if $(PY) -m pip show -q urllib3-future >/dev/null 2>&1; then \
	  $(PY) -m pip uninstall -q -y niquests urllib3-future urllib3 && \
	  rm -rf $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/urllib3; \
	fi
	# setuptools warns that a folder named like the package may shadow it: these are the
	# package's own folders (the package-dir mapping), so the warning is noise here.
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

venv: $(VENV)/.installed

# hangar's modules compiled, as pip does for a regular install: an editable install's are
# compiled again by every process that imports them where bytecode is not written
# (PYTHONDONTWRITEBYTECODE), each Ray worker among them. Up-to-date files are skipped.
bytecode: venv
	$(PY) -m compileall -q hangar sandbox scheduler verifiers cluster dashboards >/dev/null

docker:
	scripts/ensure-docker

services:
	scripts/ensure-services

base-image: bytecode docker
	scripts/ensure-apt "building the base image and the sandbox helper" debootstrap=debootstrap \
	  cc=gcc '/usr/lib/*/libc.a=libc6-dev' tune2fs=e2fsprogs
	$(HANGAR) image build-base --tag $(BASE_IMAGE)

demo: base-image
	$(PY) examples/demo.py

helm: venv
	$(HANGAR) cluster install-helm

# Harbor's package (Python >= 3.12, a virtualenv of its own) for the tests that read what
# hangar writes in Harbor's formats with Harbor's own models.
harbor:
	scripts/ensure-harbor .venv-harbor

test: base-image services helm harbor
	$(VENV)/bin/pytest $(PYTEST_ARGS)

check: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/typecheck-tree.py
	$(VENV)/bin/mypy -p hangar
	$(PY) scripts/lint-imports.py --no-cache
	$(MAKE) docs

# The documentation site, into site/ (generated pages first: the CLI, the schemas, the tutorial).
docs: venv
	$(PY) scripts/gen-docs.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

fmt: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .venv-harbor .typecheck site build *.egg-info .pytest_cache .mypy_cache .ruff_cache
