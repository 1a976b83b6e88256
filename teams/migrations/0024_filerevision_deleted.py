from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("teams", "0023_evals"),
    ]

    operations = [
        migrations.AddField(
            model_name="filerevision",
            name="deleted",
            field=models.BooleanField(
                default=False,
                help_text="The file was deleted (by a command): this revision holds no content.",
            ),
        ),
    ]
