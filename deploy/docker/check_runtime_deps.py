#!/usr/bin/env python3
"""Checks that the Dockerfile's runtime stages install every shared library the built binaries link.

    check_runtime_deps.py DOCKERFILE BUILD_DIR

For each binary, its direct dependencies (the NEEDED entries, objdump -p) are resolved with ldd and mapped to
Debian packages with dpkg -S; each package must be installed by `apt-get install` in the stage the binary is
copied into, or a stage it is built FROM, or be in the Debian base image (libc6, libgcc-s1, libstdc++6,
zlib1g). fedgather and fedgather-server go into `runtime-base`/`server`, fedavg_site into `fedavg-site`.
Prints each binary's packages and each one missing; exits 1 if any is missing, 2 on usage errors or when a
binary or tool is missing. Run where the binaries were built (Debian 12, same packages as the image).
"""
import os
import re
import subprocess
import sys

BASE_IMAGE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}
BINARIES = {  # binary (relative to BUILD_DIR) -> the stage it is copied into
    "server/fedgather-server": "server",
    "client/fedgather": "server",
    "examples/fedavg_digits/fedavg_site": "fedavg-site",
}


def stages(dockerfile_text):
    """Returns {stage: (parent stage or None, set of apt-get installed packages)}."""
    text = re.sub(r"\\\n", " ", dockerfile_text)
    result, current = {}, None
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if m:
            current = m.group(2) or m.group(1)
            parent = m.group(1) if m.group(1) in result else None
            result[current] = (parent, set())
            continue
        if current and re.match(r"RUN\s", line, re.IGNORECASE):
            for command in re.split(r"&&|;", line):
                words = command.split()
                if "apt-get" in words and "install" in words:
                    after = words[words.index("install") + 1:]
                    result[current][1].update(w for w in after if not w.startswith("-"))
    return result


def installed(stage_map, stage):
    packages = set()
    while stage:
        parent, own = stage_map.get(stage, (None, set()))
        packages |= own
        stage = parent
    return packages


def package_of(path):
    for candidate in (os.path.realpath(path), path):
        out = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.split(":", 1)[0].strip()
    return None


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    dockerfile, build_dir = argv[1], argv[2]
    with open(dockerfile, encoding="utf-8") as f:
        stage_map = stages(f.read())
    missing_total = 0
    for rel, stage in BINARIES.items():
        binary = os.path.join(build_dir, rel)
        if not os.access(binary, os.X_OK):
            print(f"check_runtime_deps: no binary {binary}", file=sys.stderr)
            return 2
        if stage not in stage_map:
            print(f"FAIL {dockerfile} has no stage {stage}")
            return 1
        needed = re.findall(r"^\s*NEEDED\s+(\S+)", subprocess.run(
            ["objdump", "-p", binary], capture_output=True, text=True, check=True).stdout, re.MULTILINE)
        resolved = dict(re.findall(r"^\s*(\S+) => (/\S+)", subprocess.run(
            ["ldd", binary], capture_output=True, text=True, check=True).stdout, re.MULTILINE))
        have = installed(stage_map, stage) | BASE_IMAGE_PACKAGES
        packages, missing = set(), []
        for lib in needed:
            path = resolved.get(lib)
            if path and path.startswith("/usr/local/cuda"):
                # CUDA and NCCL come from /usr/local/cuda where a build finds
                # them; the image builds with FEDGATHER_WITH_NCCL=OFF.
                continue
            package = package_of(path) if path else None
            if package is None:
                missing.append(f"{lib} (no Debian package found)")
                continue
            packages.add(package)
            if package not in have:
                missing.append(f"{lib} from {package}")
        print(f"{rel} (stage {stage}): {' '.join(sorted(packages))}")
        for m in missing:
            print(f"FAIL {rel}: the {stage} stage does not install {m}")
        missing_total += len(missing)
    return 1 if missing_total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
