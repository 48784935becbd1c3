"""A real SMTP server for gpudash's tests (aiosmtpd, from PyPI): it accepts every message on
127.0.0.1:PORT and writes each, as JSON (envelope sender and recipients, the headers and the body
decoded by Python's email package, and the message as sent), to
OUT_DIR/N.json, written whole then renamed so a reader never sees half a message. It prints
"ready" once it listens, and stops when its standard input closes (the test ends).

    python receiver.py PORT OUT_DIR
"""

import email
import email.policy
import json
import os
import sys

from aiosmtpd.controller import Controller


class Keep:
    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.count = 0

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        record = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "from": str(message["from"]),
            "to": str(message["to"]),
            "subject": str(message["subject"]),
            "content_type": message.get_content_type(),
            "body": message.get_content().replace("\r\n", "\n"),
            "data": envelope.content.decode("utf-8", "replace"),
        }
        path = os.path.join(self.out_dir, f"{self.count:04}.json")
        with open(path + ".part", "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(path + ".part", path)
        return "250 Message accepted for delivery"


def main():
    port, out_dir = int(sys.argv[1]), sys.argv[2]
    controller = Controller(Keep(out_dir), hostname="127.0.0.1", port=port)
    controller.start()
    print("ready", flush=True)
    sys.stdin.read()
    controller.stop()


if __name__ == "__main__":
    main()
