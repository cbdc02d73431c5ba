"""Random-parameter vocabularies for the AndroidWorld-style tasks (guigym's own lists).

AndroidWorld draws names, numbers, sentences and file names from lists in
``android_world/task_evals/utils/user_data_generation.py``; these lists are written for guigym
(same shapes: "First Last" names, ``+1`` and ten digits numbers, short sentences, ``adjective_noun``
file names, the emulator's shared-storage folders), so parameters differ by seed in the same way.
"""
from __future__ import annotations

import random
import string

FIRST_NAMES = ("Alice", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ines", "Jonas", "Kavya",
               "Liam", "Mei", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Uma", "Viktor",
               "Wen", "Yara", "Zoe")
LAST_NAMES = ("Abbott", "Barros", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ivanova",
              "Jensen", "Kowalski", "Lopez", "Moreau", "Nakamura", "Okafor", "Petrov", "Quinn", "Rossi",
              "Schmidt", "Tanaka", "Usman", "Vasquez", "Weber", "Yilmaz", "Zhang")

SENTENCES = (
    "Running ten minutes late, start without me.",
    "Can you pick up milk on the way home?",
    "The package arrived this morning.",
    "Let's move the meeting to Thursday afternoon.",
    "Happy birthday! Hope you have a great day.",
    "Don't forget the dentist appointment tomorrow.",
    "I left the keys under the blue flower pot.",
    "Dinner is at seven, bring a dessert if you can.",
    "The train is delayed by twenty minutes.",
    "Thanks for the help with the move last weekend.",
    "Remember to water the plants on Sunday.",
    "Call me when you land.",
    "The report draft is in the shared folder.",
    "Tickets for the concert are booked.",
    "Please send me the recipe for that soup.",
)

ADDRESSES = (
    "14 Harbor Lane, Portland, ME, 04101",
    "220 Willow Ave, Madison, WI, 53703",
    "7 Quarry Road, Boulder, CO, 80302",
    "981 Sunset Blvd, Santa Fe, NM, 87501",
    "55 Orchard St, Burlington, VT, 05401",
    "310 River Walk, Savannah, GA, 31401",
    "1200 Cedar Court, Boise, ID, 83702",
    "46 Lighthouse Point, Newport, RI, 02840",
)

ADJECTIVES = ("quiet", "bright", "ancient", "rapid", "gentle", "hidden", "golden", "frozen", "curious", "silver",
              "hollow", "lucky", "modern", "rustic", "vivid")
NOUNS = ("river", "garden", "summit", "lantern", "harbor", "meadow", "canyon", "compass", "orchard", "journal",
         "island", "bridge", "forest", "castle", "voyage")

#: the emulator's shared-storage folders (under /storage/emulated/0) with noise files of their kind
STORAGE_DIRECTORIES: dict[str, tuple[str, ...]] = {
    "Alarms": ("sunrise_chime.mp3", "gym_reminder.mp3", "soft_bell.mp3", "weekday_alarm.mp3"),
    "Audiobooks": ("sea_stories.mp3", "physics_lectures.mp3", "garden_guide.mp3", "old_legends.mp3"),
    "DCIM": ("beach_day.jpg", "city_lights.jpg", "family_dinner.jpg", "snow_trail.jpg"),
    "Documents": ("tax_summary.pdf", "lease_agreement.pdf", "course_syllabus.pdf", "trip_budget.pdf"),
    "Download": ("installer_notes.txt", "menu_spring.pdf", "bank_statement.pdf", "map_export.kml"),
    "Movies": ("home_video.mp4", "drone_flight.mp4", "school_play.mp4", "timelapse_clouds.mp4"),
    "Music": ("evening_jazz.mp3", "piano_etude.mp3", "road_songs.mp3", "lofi_beats.mp3"),
    "Notifications": ("ping_soft.ogg", "pop_up.ogg", "drip.ogg", "tick_tock.ogg"),
    "Pictures": ("sketch_cat.png", "wallpaper_hills.png", "receipt_scan.png", "diagram_v2.png"),
    "Podcasts": ("tech_weekly_12.mp3", "history_hour_3.mp3", "cooking_chat_7.mp3", "news_brief_40.mp3"),
    "Recordings": ("voice_memo_1.m4a", "lecture_clip.m4a", "interview_take2.m4a", "idea_dump.m4a"),
    "Ringtones": ("classic_ring.ogg", "marimba_loop.ogg", "retro_phone.ogg", "calm_tone.ogg"),
}

NOTE_TITLES = ("grocery_list", "meeting_notes", "book_ideas", "workout_plan", "travel_checklist", "project_todo",
               "gift_ideas", "reading_log", "weekly_goals", "recipe_draft")

#: Pro Expense categories (id -> name), as the app numbers them (AndroidWorld's Expense row type)
EXPENSE_CATEGORIES = {1: "Others", 2: "Income", 3: "Food", 4: "Housing", 5: "Social", 6: "Entertainment",
                      7: "Transportation", 8: "Clothes", 9: "Health Care", 10: "Education", 11: "Donation"}
EXPENSE_NAMES = {
    "Others": ("Stationery", "Phone case", "Key copy"), "Income": ("Salary", "Freelance payment", "Refund"),
    "Food": ("Groceries", "Lunch out", "Bakery"), "Housing": ("Rent", "Plumber", "Electricity bill"),
    "Social": ("Birthday gift", "Team dinner", "Wedding present"),
    "Entertainment": ("Cinema", "Concert ticket", "Streaming plan"),
    "Transportation": ("Bus pass", "Taxi ride", "Fuel"), "Clothes": ("Winter coat", "Running shoes", "Scarf"),
    "Health Care": ("Pharmacy", "Dental check", "Eye exam"), "Education": ("Textbook", "Online course", "Workshop"),
    "Donation": ("Food bank", "Animal shelter", "Library fund"),
}
EXPENSE_NOTES = ("paid by card", "split with a friend", "monthly", "reimbursable", "one-off", "cash", "")

_RECIPE_STYLES = ("Lemon Herb", "Smoky", "Spicy", "Creamy", "Garlic", "Rustic", "Sweet Chili", "Mediterranean")
_RECIPE_DISHES = ("Chicken", "Risotto", "Chickpea Curry", "Tomato Soup", "Tacos", "Stir Fry", "Pasta", "Lentil Stew")
#: 64 distinct titles, e.g. "Smoky Lentil Stew"
RECIPE_TITLES = tuple(f"{s} {d}" for s in _RECIPE_STYLES for d in _RECIPE_DISHES)
RECIPE_SERVINGS = ("1 serving", "2 servings", "4 servings", "6 servings")
RECIPE_TIMES = ("10 mins", "20 mins", "30 mins", "45 mins", "1 hr")
RECIPE_SOURCES = ("family notebook", "cooking magazine", "", "neighbour")
RECIPE_DESCRIPTIONS = ("A quick weeknight meal.", "Comfort food for cold days.", "Light and fresh.",
                       "Great for meal prep.", "")
RECIPE_INGREDIENTS = ("salt, pepper, olive oil", "rice, stock, onion", "flour, eggs, milk", "beans, garlic, cumin",
                      "pasta, tomatoes, basil")
RECIPE_DIRECTIONS = ("Mix everything and bake for 30 minutes.", "Simmer gently for 20 minutes, stirring.",
                     "Fry on high heat, then season.", "Blend until smooth and serve warm.")


def rng_of(seed: "int | random.Random | None") -> random.Random:
    """A ``random.Random`` for ``seed`` (an int, an existing generator, or None for OS entropy)."""
    return seed if isinstance(seed, random.Random) else random.Random(seed)


def random_name(rng: random.Random, excluding: str = "") -> str:
    """``"First Last"``, never equal to ``excluding``."""
    while True:
        name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
        if name != excluding:
            return name


def random_number(rng: random.Random) -> str:
    """``+1`` and ten digits, the first of the ten not 0 or 1 (a plausible North American number)."""
    return "+1" + str(rng.randint(2, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(9))


def random_file_stem(rng: random.Random) -> str:
    """``adjective_noun_NN`` (a suffix makes collisions with noise files unlikely)."""
    return f"{rng.choice(ADJECTIVES)}_{rng.choice(NOUNS)}_{rng.randint(10, 99)}"


def random_string(rng: random.Random, n: int) -> str:
    """``n`` letters and digits (AndroidWorld's random note contents and headers)."""
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))
