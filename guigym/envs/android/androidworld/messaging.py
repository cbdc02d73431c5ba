"""Contacts and SMS tasks (AndroidWorld ``single/contacts.py``, ``single/sms.py``,
``common_validators/contacts_validators.py``, ``common_validators/sms_validators.py``).

* ContactsAddContact: contacts wiped first; success when ``content://contacts/phones/`` has the
  name with the same digits.
* SimpleSmsSend / SimpleSmsSendReceivedAddress / SimpleSmsReply: SMS tables emptied first; success
  when ``content://sms/sent`` holds a message to the number with a fuzzy-equal body dated within
  the last 5 minutes of device time *and* Simple SMS Messenger is the foreground app (AndroidWorld
  requires both). ReceivedAddress adds two contacts and a received message carrying an address;
  the agent must forward that address to the other contact. Reply puts messages from several
  numbers in the inbox, one from the target number.
"""
from __future__ import annotations

import random
from typing import Any, Optional

from guigym.envs.android.androidworld import data as D
from guigym.envs.android.androidworld import validators as V
from guigym.envs.android.androidworld.base import AndroidWorldTask, register
from guigym.envs.android.device import AndroidDevice

SMS_PACKAGE = "com.simplemobiletools.smsmessenger"


@register
class ContactsAddContact(AndroidWorldTask):
    app_names = ("contacts",)
    complexity = 1.2
    schema = ("name", "number")
    template = "Create a new contact for {name}. Their number is {number}."

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return {"name": D.random_name(rng), "number": D.random_number(rng)}

    def initialize_task(self, device: AndroidDevice) -> None:
        V.clear_contacts(device)
        super().initialize_task(device)

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        want = (self.params["name"], V.digits(self.params["number"]))
        return 1.0 if want in V.list_contacts(device) else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        V.add_contact(device, self.params["name"], self.params["number"])  # the rows the Contacts app writes
        return None

    def tear_down(self, device: AndroidDevice) -> None:
        V.clear_contacts(device)
        super().tear_down(device)


class _SmsSend(AndroidWorldTask):
    app_names = ("simple sms messenger",)
    complexity = 1.2
    schema = ("number", "message")

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return {"number": D.random_number(rng), "message": rng.choice(D.SENTENCES)}

    def initialize_task(self, device: AndroidDevice) -> None:
        device.shell(["cmd", "connectivity", "airplane-mode", "disable"])  # messages must be able to leave
        V.clear_sms(device)
        self.setup_messages(device, V.device_time_ms(device))
        super().initialize_task(device)

    def setup_messages(self, device: AndroidDevice, now_ms: int) -> None:
        """Messages the task needs before it starts (none by default)."""

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        super().is_successful(device, answer)
        sent = V.sms_was_sent(V.sms_rows(device, "sent"), self.params["number"], self.params["message"],
                              V.device_time_ms(device))
        in_app = V.foreground_package(device) == SMS_PACKAGE
        return 1.0 if sent and in_app else 0.0

    def reference(self, device: AndroidDevice) -> Optional[str]:
        """The sent row Simple SMS Messenger leaves (type 2, now), with the app in front."""
        device.launch_app(SMS_PACKAGE)
        V.device_sql(device, V.SMS_DB, "INSERT INTO sms (address, body, date, type, read) VALUES ("
                     f"{V.sql_literal(self.params['number'])}, {V.sql_literal(self.params['message'])}, "
                     f"{V.device_time_ms(device)}, 2, 1);")
        return None

    def tear_down(self, device: AndroidDevice) -> None:
        V.clear_sms(device)
        super().tear_down(device)


@register
class SimpleSmsSend(_SmsSend):
    template = "Send a text message using Simple SMS Messenger to {number} with message: {message}"


@register
class SimpleSmsReply(_SmsSend):
    template = "Reply to {number} with message: {message} in Simple SMS Messenger"

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        p = super()._random_params(rng)
        others = [(D.random_number(rng), rng.choice(D.SENTENCES)) for _ in range(rng.randint(1, 4))]
        p["inbox"] = others + [(p["number"], rng.choice(D.SENTENCES))]
        rng.shuffle(p["inbox"])
        return p

    def setup_messages(self, device: AndroidDevice, now_ms: int) -> None:
        for i, (number, body) in enumerate(self.params["inbox"]):
            V.receive_sms(device, number, body, now_ms - (len(self.params["inbox"]) - i) * 60_000)


@register
class SimpleSmsSendReceivedAddress(_SmsSend):
    complexity = 1.8
    schema = ("name1", "number", "name2", "message")
    template = "Text the address of the event to {name1} that {name2} just sent me in Simple SMS Messenger"

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        name1 = D.random_name(rng)
        name2 = D.random_name(rng, excluding=name1)
        return {"name1": name1, "number": D.random_number(rng), "name2": name2,
                "name2_number": D.random_number(rng), "message": rng.choice(D.ADDRESSES)}

    def setup_messages(self, device: AndroidDevice, now_ms: int) -> None:
        V.clear_contacts(device)
        V.add_contact(device, self.params["name1"], self.params["number"])
        V.add_contact(device, self.params["name2"], self.params["name2_number"])
        V.receive_sms(device, self.params["name2_number"], self.params["message"], now_ms - 30_000)

    def tear_down(self, device: AndroidDevice) -> None:
        V.clear_contacts(device)
        super().tear_down(device)


@register
class SimpleSmsReplyMostRecent(SimpleSmsReply):
    """0-5 messages from other numbers, then the most recent one from ``number``."""

    template = "Reply to the most recent text message using Simple SMS Messenger with message: {message}"

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        p = _SmsSend._random_params(rng)
        others = [(D.random_number(rng), rng.choice(D.SENTENCES)) for _ in range(rng.randint(0, 5))]
        last = rng.choice([s for s in D.SENTENCES if s != p["message"]])
        p["inbox"] = others + [(p["number"], last)]  # setup_messages dates them in this order
        return p


#: what the contact texts back before the task starts (AndroidWorld's wording)
RESEND_ASK = "Sorry, there was a glitch, what was the last message you sent me?"


@register
class SimpleSmsResend(_SmsSend):
    """A message was sent to a contact, who asks for it again: exactly one new sent message, equal
    (number and text) to the one sent before (AndroidWorld ``SimpleSmsResend``)."""

    schema = ("name", "number", "message")
    template = "Resend the message I just sent to {name} in Simple SMS Messenger"

    @classmethod
    def _random_params(cls, rng: random.Random) -> dict[str, Any]:
        return {"name": D.random_name(rng), **super()._random_params(rng)}

    def setup_messages(self, device: AndroidDevice, now_ms: int) -> None:
        V.clear_contacts(device)
        V.add_contact(device, self.params["name"], self.params["number"])
        V.device_sql(device, V.SMS_DB, "INSERT INTO sms (address, body, date, type, read) VALUES ("
                     f"{V.sql_literal(self.params['number'])}, {V.sql_literal(self.params['message'])}, "
                     f"{now_ms - 120_000}, 2, 1);")
        V.receive_sms(device, self.params["number"], RESEND_ASK, now_ms - 60_000)

    def initialize_task(self, device: AndroidDevice) -> None:
        super().initialize_task(device)
        self.before_ids = {r.get("_id") for r in V.sms_rows(device, "sent")}

    def is_successful(self, device: AndroidDevice, answer: Optional[str] = None) -> float:
        AndroidWorldTask.is_successful(self, device, answer)
        new = [r for r in V.sms_rows(device, "sent") if r.get("_id") not in self.before_ids]
        if len(new) != 1:
            return 0.0
        same = (V.digits(new[0].get("address", "")) == V.digits(self.params["number"])
                and new[0].get("body", "") == self.params["message"])
        return 1.0 if same else 0.0

    def tear_down(self, device: AndroidDevice) -> None:
        V.clear_contacts(device)
        super().tear_down(device)
