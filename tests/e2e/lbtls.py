"""Certificates for the TLS tests, made with the openssl command in a temp
dir: a CA; the broker's certificate for 127.0.0.1 and localhost; client
certificates signed by the CA (one named by subjectAltName, one by its CN
only), one that expired, and one signed by another CA that merely has the
same name. Each is a (certificate, key) pair of paths."""

import os
import shutil
import subprocess
import sys
import tempfile

CA_CONF = """[ ca ]
default_ca = lb
[ lb ]
dir = %(dir)s
database = %(dir)s/index.txt
new_certs_dir = %(dir)s
serial = %(dir)s/serial
default_md = sha256
policy = any
copy_extensions = copy
unique_subject = no
[ any ]
commonName = supplied
"""


def openssl(*args, cwd):
    subprocess.run(("openssl",) + args, cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Certs:
    """The files under dir; made once, at construction."""

    def __init__(self, dir):
        self.dir = dir
        os.makedirs(dir, exist_ok=True)
        self.ca = self._ca("ca", "lockbroker test CA")
        self.rogue_ca = self._ca("rogue", "lockbroker test CA")
        self.server = self.issue("server", "localhost",
                                 "DNS:localhost,IP:127.0.0.1")
        self.billing = self.issue("billing", "billing client",
                                  "DNS:billing.example")
        self.cn_only = self.issue("cnonly", "orders.example", None)
        self.expired = self.issue("expired", "expired client",
                                  "DNS:billing.example",
                                  dates=("20200101000000Z",
                                         "20200102000000Z"))
        self.rogue = self.issue("rogue-billing", "billing client",
                                "DNS:billing.example", ca="rogue")

    def path(self, name):
        return os.path.join(self.dir, name)

    def _ca(self, name, cn):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:P-256", "-nodes", "-days", "30",
                "-subj", "/CN=%s" % cn, "-keyout", name + ".key",
                "-out", name + ".crt", cwd=self.dir)
        with open(self.path(name + ".conf"), "w") as f:
            f.write(CA_CONF % {"dir": self.path(name + ".d")})
        os.makedirs(self.path(name + ".d"), exist_ok=True)
        open(self.path(name + ".d/index.txt"), "w").close()
        with open(self.path(name + ".d/serial"), "w") as f:
            f.write("1000\n")
        return self.path(name + ".crt")

    def issue(self, name, cn, san, dates=None, ca="ca"):
        """A key and a certificate signed by ca (its name), for cn with the
        subjectAltName san (None: none), valid from now for 30 days or
        between dates (openssl's YYYYMMDDHHMMSSZ)."""
        openssl("req", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=%s" % cn,
                "-keyout", name + ".key", "-out", name + ".csr",
                *(("-addext", "subjectAltName=" + san) if san else ()),
                cwd=self.dir)
        when = ("-startdate", dates[0], "-enddate", dates[1]) if dates \
            else ("-days", "30")
        openssl("ca", "-batch", "-notext", "-config", ca + ".conf",
                "-cert", ca + ".crt", "-keyfile", ca + ".key",
                "-in", name + ".csr", "-out", name + ".crt", *when,
                cwd=self.dir)
        return self.path(name + ".crt"), self.path(name + ".key")


if __name__ == "__main__":
    # lbtls.py --run CMD...: CMD with LB_TLS_CERTS naming a directory of
    # fresh certificates (tests/unit's test_tls), removed afterwards.
    if len(sys.argv) < 3 or sys.argv[1] != "--run":
        sys.exit("usage: lbtls.py --run COMMAND [ARG...]")
    tmp = tempfile.mkdtemp(prefix="lbtls-")
    try:
        Certs(tmp)
        env = dict(os.environ, LB_TLS_CERTS=tmp)
        # Under meson's valgrind setup, the command runs under it too.
        wrap = os.environ.get("LB_WRAPPER", "").split()
        if wrap:
            env["CK_FORK"] = "no"
        sys.exit(subprocess.run(wrap + sys.argv[2:], env=env).returncode)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
