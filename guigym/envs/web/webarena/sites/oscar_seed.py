"""Seed the embedded shop's database (run by oscar_shop.py inside the shop's Django project).

Deterministic (``random.Random(SEED)``) and offline: six top-level categories with two
subcategories each, :data:`N_PRODUCTS` products (title, UPC, description, price, stock) sold by one
partner, approved customer reviews on :data:`N_REVIEWED` of them, WebArena's customer
``emma.lopez@gmail.com`` / ``Password.123`` with past orders, 30 other customers with orders, and the staff account ``admin`` / ``admin1234`` (WebArena's
``shopping_admin`` account). Facts tasks ask about (prices, order totals, statuses) are read by
the tasks' reference solutions from the pages, never from this module.
"""
from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

SEED = 20261125
N_PRODUCTS = 1000
N_REVIEWED = 300  # products with 1-4 approved customer reviews
CUSTOMER = ("emma.lopez@gmail.com", "Password.123", "Emma", "Lopez")
ADMIN = ("admin", "admin1234", "admin@onestopmarket.example")
CATALOGUE: dict[str, dict[str, tuple[str, ...]]] = {
    "Grocery & Gourmet Food": {"Snacks": ("pretzels", "trail mix", "rice crackers", "granola bars"),
                               "Beverages": ("green tea", "cold brew coffee", "sparkling water", "cocoa mix")},
    "Home & Kitchen": {"Cookware": ("skillet", "saucepan", "dutch oven", "wok"),
                       "Storage": ("glass jars", "bread box", "spice rack", "lunch box")},
    "Electronics": {"Audio": ("headphones", "bluetooth speaker", "earbuds", "turntable"),
                    "Accessories": ("usb-c cable", "power bank", "phone stand", "wireless charger")},
    "Beauty & Personal Care": {"Skin Care": ("face cream", "sunscreen", "lip balm", "cleanser"),
                               "Hair Care": ("shampoo", "conditioner", "hair oil", "wide comb")},
    "Sports & Outdoors": {"Camping": ("tent", "sleeping bag", "camp stove", "headlamp"),
                          "Fitness": ("yoga mat", "jump rope", "kettlebell", "foam roller")},
    "Office Products": {"Writing": ("gel pens", "fountain pen", "pencil set", "highlighters"),
                        "Paper": ("notebook", "sticky notes", "sketchbook", "planner")},
}
BRANDS = ("Northwind", "Acme", "Bluebird", "Cedar & Co", "Lumen", "Harbor", "Quill", "Summit", "Maple Row", "Orbit")
STYLES = ("Classic", "Deluxe", "Mini", "Pro", "Eco", "Travel", "Family Size", "Everyday")
FIRST = ("Alex", "Sam", "Jordan", "Taylor", "Morgan", "Casey", "Riley", "Jamie", "Avery", "Quinn")
LAST = ("Nguyen", "Garcia", "Smith", "Khan", "Rossi", "Muller", "Okafor", "Silva", "Kim", "Novak")
STATUSES = ("Pending", "Processing", "Shipped", "Complete", "Canceled")


def main() -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.contrib.sites.models import Site
    from oscar.apps.address.models import Country
    from oscar.apps.catalogue.categories import create_from_breadcrumbs
    from oscar.apps.catalogue.models import Product, ProductCategory, ProductClass
    from oscar.apps.catalogue.reviews.models import ProductReview
    from oscar.apps.order.models import Line, Order, ShippingAddress
    from oscar.apps.partner.models import Partner, StockRecord

    rng = random.Random(SEED)
    Site.objects.update_or_create(id=1, defaults={"domain": "127.0.0.1", "name": "One Stop Market"})
    us, _ = Country.objects.get_or_create(iso_3166_1_a2="US", defaults={
        "iso_3166_1_a3": "USA", "iso_3166_1_numeric": "840", "printable_name": "United States",
        "name": "United States of America", "is_shipping_country": True})
    User = get_user_model()
    admin = User.objects.create_user(username=ADMIN[0], email=ADMIN[2], password=ADMIN[1])
    admin.is_staff = admin.is_superuser = True
    admin.save()
    emma = User.objects.create_user(username="emma.lopez", email=CUSTOMER[0], password=CUSTOMER[1],
                                    first_name=CUSTOMER[2], last_name=CUSTOMER[3])
    others = []
    for i in range(30):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        email = f"{first}.{last}{i}@example.com".lower()
        others.append(User.objects.create_user(username=email.split("@")[0], email=email, password="Shopper.123",
                                               first_name=first, last_name=last))

    pclass = ProductClass.objects.create(name="Merchandise", requires_shipping=True, track_stock=True)
    partner = Partner.objects.create(name="One Stop Market")
    products: list[tuple[object, object]] = []
    leaves = [(top, sub, things) for top, subs in CATALOGUE.items() for sub, things in subs.items()]
    titles: set[str] = set()
    while len(products) < N_PRODUCTS:
        top, sub, things = leaves[len(products) % len(leaves)]
        title = f"{rng.choice(BRANDS)} {rng.choice(STYLES)} {rng.choice(things).title()}"
        if title in titles:
            continue
        titles.add(title)
        cat = create_from_breadcrumbs(f"{top} > {sub}")
        p = Product.objects.create(product_class=pclass, title=title, upc=f"OSM{100000 + len(products)}",
                                   description=f"{title}: a {sub.lower()} item from {top}. "
                                               f"Sold by One Stop Market.", is_public=True)
        ProductCategory.objects.create(product=p, category=cat)
        price = Decimal(rng.randrange(199, 15999)) / 100
        stock = StockRecord.objects.create(product=p, partner=partner, partner_sku=f"SKU-{p.id:05d}",
                                           price_currency="USD", price=price, num_in_stock=rng.randrange(0, 60))
        products.append((p, stock))

    review_words = ("Works as described.", "Would buy again.", "Arrived quickly.", "Smaller than expected.",
                    "Great value for the price.", "The quality could be better.", "A gift that went down well.")
    for p, _ in rng.sample(products, N_REVIEWED):
        for user in rng.sample([emma, *others], rng.randrange(1, 5)):
            score = rng.choice((1, 2, 3, 4, 4, 5, 5, 5))
            ProductReview.objects.create(product=p, user=user, score=score, status=ProductReview.APPROVED,
                                         title=f"{('Poor', 'Meh', 'Okay', 'Good', 'Excellent')[score - 1]} "
                                               f"{p.title.split()[-1].lower()}",
                                         body=" ".join(rng.sample(review_words, 2)))
    for p, _ in products:  # Oscar keeps the mean score on the product (its signal handler does this on save)
        p.update_rating()

    start = dt.datetime(2023, 1, 5, 10, 0, tzinfo=dt.timezone.utc)
    number = 100
    for user, n_orders in [(emma, 12)] + [(u, rng.randrange(1, 4)) for u in others]:
        for _ in range(n_orders):
            number += 1
            lines = rng.sample(products, rng.randrange(1, 4))
            qty = [rng.randrange(1, 4) for _ in lines]
            subtotal = sum((s.price * q for (_, s), q in zip(lines, qty)), Decimal("0"))
            shipping = Decimal("5.00")
            addr = ShippingAddress.objects.create(first_name=user.first_name, last_name=user.last_name,
                                                  line1=f"{rng.randrange(1, 999)} Main Street", line4="Pittsburgh",
                                                  state="PA", postcode="15213", country=us)
            order = Order.objects.create(
                number=str(number), site_id=1, user=user, currency="USD", shipping_address=addr,
                total_incl_tax=subtotal + shipping, total_excl_tax=subtotal + shipping,
                shipping_incl_tax=shipping, shipping_excl_tax=shipping, shipping_method="Standard shipping",
                shipping_code="standard", status=rng.choice(STATUSES),
                date_placed=start + dt.timedelta(days=rng.randrange(0, 600), minutes=rng.randrange(0, 1440)))
            for (p, s), q in zip(lines, qty):
                Line.objects.create(order=order, partner=partner, partner_name=partner.name,
                                    partner_sku=s.partner_sku, stockrecord=s, product=p, title=p.title, upc=p.upc,
                                    quantity=q, line_price_incl_tax=s.price * q, line_price_excl_tax=s.price * q,
                                    line_price_before_discounts_incl_tax=s.price * q,
                                    line_price_before_discounts_excl_tax=s.price * q,
                                    unit_price_incl_tax=s.price, unit_price_excl_tax=s.price, status=order.status,
                                    num_allocated=q if order.status != "Canceled" else 0)


if __name__ == "__main__":
    main()
