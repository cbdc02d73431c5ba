"""Seed the embedded forum's database (run by spirit.py inside the forum's Django project).

Deterministic (``random.Random(SEED)``) and offline: WebArena's forum account
``MarvelsGrandpa17`` / ``test1234`` and 40 generated users, eight subforums (Spirit categories,
named after WebArena's reddit forums), and :data:`N_TOPICS` topics with 1-8 comments each, titles
and bodies from the word lists below. Facts tasks ask about (authors, comment counts, categories)
are read by the tasks' reference solutions from the pages, never from this module.
"""
from __future__ import annotations

import datetime as dt
import html
import random

SEED = 20261124
N_TOPICS = 320
ACCOUNT = ("MarvelsGrandpa17", "test1234", "marvelsgrandpa17@example.com")
FORUMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "books": ("Books, authors and reading lists", ("a slow-burn mystery novel", "the last chapter of the trilogy",
                                                   "an audiobook narrator", "a used bookshop find", "poetry collections")),
    "gaming": ("Video games and tabletop games", ("a speedrun route", "the new open-world release", "retro consoles",
                                                  "a co-op board game", "controller drift")),
    "movies": ("Films old and new", ("a director's cut", "the festival winner", "practical effects", "silent films",
                                     "a sequel nobody asked for")),
    "history": ("Ask and discuss history", ("medieval bridges", "the printing press", "ancient harbours",
                                             "a forgotten treaty", "old railway maps")),
    "technology": ("Gadgets, software and the web", ("a mechanical keyboard", "home servers", "e-ink tablets",
                                                     "open-source firmware", "battery life")),
    "music": ("Instruments, albums and concerts", ("a live album", "learning the cello", "vinyl pressing",
                                                   "a folk festival", "synth patches")),
    "science": ("Science news and questions", ("tardigrades", "a comet sighting", "sourdough microbiology",
                                               "ocean currents", "lab notebooks")),
    "food": ("Cooking, baking and recipes", ("cast-iron pans", "a ramen broth", "fermented hot sauce",
                                             "rye bread", "a lentil stew")),
}
OPENERS = ("What do you think about {s}?", "Recommendations for {s}", "I finally tried {s}",
           "Unpopular opinion about {s}", "Help: questions about {s}", "A short review of {s}",
           "Is it worth getting into {s}?", "Photos and notes on {s}")
ADJ = ("quiet", "brave", "salty", "cosmic", "tidy", "rusty", "lucky", "mellow", "sharp", "witty")
NOUN = ("otter", "falcon", "walrus", "maple", "comet", "pixel", "badger", "lantern", "pebble", "heron")
SENTENCES = ("I have been thinking about this for a while.", "Happy to hear other views.",
             "This changed how I see it.", "Mostly agree, with one caveat.", "Source: my own notes.",
             "Would try again next year.", "The details matter more than people think.",
             "Not sure I agree, but interesting.", "Thanks for posting this.", "Saving this thread.")


def main() -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.utils.text import slugify
    from spirit.category.models import Category
    from spirit.comment.models import Comment
    from spirit.topic.models import Topic
    from spirit.user.models import UserProfile

    rng = random.Random(SEED)
    User = get_user_model()
    users = []
    name, pw, email = ACCOUNT
    users.append(User.objects.create_user(username=name, email=email, password=pw))
    seen = {name}
    while len(users) < 41:
        uname = f"{rng.choice(ADJ)}_{rng.choice(NOUN)}{rng.randrange(10, 99)}"
        if uname in seen:
            continue
        seen.add(uname)
        users.append(User.objects.create_user(username=uname, email=f"{uname}@example.com", password="forum1234"))
    for u in users:
        UserProfile.objects.update_or_create(user=u, defaults={"is_verified": True})
    cats = {}
    for i, (slug, (desc, _)) in enumerate(FORUMS.items()):
        cats[slug] = Category.objects.create(title=slug, slug=slugify(slug), description=desc, sort=i)
    start = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.timezone.utc)
    titles = set()
    for k in range(N_TOPICS):
        forum = rng.choice(list(FORUMS))
        subject = rng.choice(FORUMS[forum][1])
        title = rng.choice(OPENERS).format(s=subject)
        if title in titles:  # titles stay unique, so a task can name a topic by its title
            title = f"{title} (part {k})"
        titles.add(title)
        author = rng.choice(users)
        when = start + dt.timedelta(hours=7 * k + rng.randrange(0, 6))
        n = rng.randrange(1, 9)
        topic = Topic.objects.create(user=author, category=cats[forum], title=title, slug=slugify(title)[:50],
                                     date=when, last_active=when, comment_count=n)
        for c in range(n):
            who = author if c == 0 else rng.choice(users)
            text = " ".join(rng.sample(SENTENCES, 2))
            Comment.objects.create(user=who, topic=topic, comment=text, comment_html=f"<p>{html.escape(text)}</p>",
                                   date=when + dt.timedelta(minutes=37 * c))
        Topic.objects.filter(pk=topic.pk).update(last_active=when + dt.timedelta(minutes=37 * (n - 1)))


if __name__ == "__main__":
    main()
