#!/usr/bin/env python3
"""Checks fedgather's deployment invariants over rendered Kubernetes manifests (kubectl kustomize output).

    check_invariants.py FILE...   ("-" reads standard input)

Every pod template (Pod, Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob):
  - pod securityContext: runAsNonRoot true, runAsUser set and not 0, seccompProfile RuntimeDefault;
    no hostNetwork, hostPID, hostIPC or hostPath volumes;
  - every container and init container: securityContext with allowPrivilegeEscalation false, privileged not true,
    capabilities drop ALL and add nothing, readOnlyRootFilesystem true; non-root (runAsNonRoot not false and
    runAsUser not 0, where the container overrides the pod) and seccomp RuntimeDefault where it sets one;
    resources requests and limits for cpu and memory;
  - every long-running container (containers of all but Jobs and CronJobs): readinessProbe and livenessProbe.
Where the participants' StatefulSet `site` (N replicas) and the ConfigMap `fedgather-policy` are both rendered,
they must agree: all-sites projects exactly the Secrets fedgather-site-0..N-1; the policy's group demo has
world_size W >= N participants, among them spiffe://fedgather/site-0..N-1 (the others are sites outside the
cluster); FEDGATHER_WORLD_SIZE is W.

Prints each violation and exits 1 if there is any (or if no pod template was found), 0 otherwise, 2 on usage or
YAML errors. Uses PyYAML (Debian's python3-yaml).
"""
import sys

import yaml

POD_TEMPLATE_PATHS = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
BATCH_KINDS = {"Job", "CronJob"}


def dig(obj, *path):
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def check_pod(where, kind, pod, problems):
    def bad(what):
        problems.append(f"{where}: {what}")

    psc = pod.get("securityContext") or {}
    if psc.get("runAsNonRoot") is not True:
        bad("pod securityContext.runAsNonRoot is not true")
    if not isinstance(psc.get("runAsUser"), int) or psc.get("runAsUser") == 0:
        bad("pod securityContext.runAsUser is not a non-zero UID")
    if dig(psc, "seccompProfile", "type") != "RuntimeDefault":
        bad("pod securityContext.seccompProfile.type is not RuntimeDefault")
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(host) is True:
            bad(f"{host} is true")
    for volume in pod.get("volumes") or []:
        if "hostPath" in volume:
            bad(f"volume {volume.get('name')} is a hostPath")

    groups = [("initContainers", False), ("containers", kind not in BATCH_KINDS)]
    if not pod.get("containers"):
        bad("no containers")
    for field, long_running in groups:
        for c in pod.get(field) or []:
            cw = f"{field[:-1]} {c.get('name')}"
            csc = c.get("securityContext")
            if not isinstance(csc, dict):
                bad(f"{cw}: no securityContext")
                csc = {}
            if csc.get("allowPrivilegeEscalation") is not False:
                bad(f"{cw}: allowPrivilegeEscalation is not false")
            if csc.get("privileged") is True:
                bad(f"{cw}: privileged is true")
            caps = csc.get("capabilities") or {}
            if "ALL" not in (caps.get("drop") or []):
                bad(f"{cw}: capabilities.drop does not contain ALL")
            if caps.get("add"):
                bad(f"{cw}: capabilities.add is {caps.get('add')}")
            if csc.get("readOnlyRootFilesystem") is not True:
                bad(f"{cw}: readOnlyRootFilesystem is not true")
            non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
            if non_root is not True:
                bad(f"{cw}: runAsNonRoot is not true")
            if csc.get("runAsUser", psc.get("runAsUser")) == 0:
                bad(f"{cw}: runs as UID 0")
            seccomp = dig(csc, "seccompProfile", "type") or dig(psc, "seccompProfile", "type")
            if seccomp != "RuntimeDefault":
                bad(f"{cw}: seccompProfile.type is {seccomp}, not RuntimeDefault")
            resources = c.get("resources") or {}
            for section in ("requests", "limits"):
                for resource in ("cpu", "memory"):
                    if not (resources.get(section) or {}).get(resource):
                        bad(f"{cw}: no resources.{section}.{resource}")
            if long_running:
                for probe in ("readinessProbe", "livenessProbe"):
                    if not isinstance(c.get(probe), dict):
                        bad(f"{cw}: no {probe}")


def check_sites_agree(objects, problems):
    sites = [o for o in objects if o.get("kind") == "StatefulSet" and dig(o, "metadata", "name") == "site"]
    policies = [o for o in objects if o.get("kind") == "ConfigMap" and dig(o, "metadata", "name") == "fedgather-policy"]
    if not sites or not policies:
        return
    where = "StatefulSet site / ConfigMap fedgather-policy"
    site, policy_map = sites[0], policies[0]
    replicas = dig(site, "spec", "replicas")
    spec = dig(site, "spec", "template", "spec") or {}
    container = next((c for c in spec.get("containers") or [] if c.get("name") == "site"), {})
    env = {e.get("name"): e.get("value") for e in container.get("env") or []}
    volume = next((v for v in spec.get("volumes") or [] if v.get("name") == "all-sites"), {})
    secrets = [dig(s, "secret", "name") for s in dig(volume, "projected", "sources") or []]
    try:
        policy = yaml.safe_load(dig(policy_map, "data", "policy.yaml") or "")
    except yaml.YAMLError as err:
        problems.append(f"{where}: policy.yaml does not parse: {err}")
        return
    group = next((g for g in (policy or {}).get("groups") or [] if g.get("name") == "demo"), None)
    if not isinstance(replicas, int) or replicas < 1:
        problems.append(f"{where}: replicas is {replicas!r}")
        return
    want_secrets = [f"fedgather-site-{i}" for i in range(replicas)]
    if secrets != want_secrets:
        problems.append(f"{where}: all-sites projects {secrets}, want {want_secrets}")
    if group is None:
        problems.append(f"{where}: the policy has no group demo")
        return
    world_size = group.get("world_size")
    if not isinstance(world_size, int) or replicas > world_size:
        problems.append(f"{where}: replicas {replicas} exceed the policy's world_size {world_size!r}")
    if env.get("FEDGATHER_WORLD_SIZE") != str(world_size):
        problems.append(f"{where}: FEDGATHER_WORLD_SIZE is {env.get('FEDGATHER_WORLD_SIZE')!r}, "
                        f"the policy's world_size {world_size!r}")
    participants = {k for k, v in (group.get("members") or {}).items() if v == "participant"}
    if len(participants) != world_size:
        problems.append(f"{where}: the policy has {len(participants)} participants, world_size {world_size!r}")
    missing = sorted({f"spiffe://fedgather/site-{i}" for i in range(replicas)} - participants)
    if missing:
        problems.append(f"{where}: the policy's participants lack {missing}")


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    objects = []
    for name in argv[1:]:
        try:
            stream = sys.stdin if name == "-" else open(name, encoding="utf-8")
            with stream:
                objects += [d for d in yaml.safe_load_all(stream) if d is not None]
        except (OSError, yaml.YAMLError) as err:
            print(f"check_invariants: {name}: {err}", file=sys.stderr)
            return 2
    problems = []
    pods = 0
    for obj in objects:
        if not isinstance(obj, dict):
            problems.append(f"not a mapping: {obj!r:.60}")
            continue
        kind = obj.get("kind")
        if kind not in POD_TEMPLATE_PATHS:
            continue
        where = f"{kind} {dig(obj, 'metadata', 'name')}"
        pod = dig(obj, *POD_TEMPLATE_PATHS[kind])
        if not isinstance(pod, dict):
            problems.append(f"{where}: no pod template")
            continue
        pods += 1
        check_pod(where, kind, pod, problems)
    check_sites_agree(objects, problems)
    if pods == 0:
        problems.append("no pod templates found")
    for p in problems:
        print(f"FAIL {p}")
    print(f"invariants: {pods} pod templates, {len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
