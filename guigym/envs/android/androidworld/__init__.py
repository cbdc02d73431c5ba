"""AndroidWorld-style parameterised tasks over the AndroidDevice Protocol.

``TASKS`` maps AndroidWorld task names to classes (see :mod:`.base` for the contract); importing this
package registers all of them. Validators for settings, content providers, files, app SQLite
databases and answers are in :mod:`.validators`; reporting metadata in :mod:`.metadata`.

Implemented (83 of AndroidWorld's 116, over 15 apps): System Wi-Fi / Bluetooth / brightness (12,
settings), OpenAppTaskEval (camera, clock, contacts, settings, dialer), TurnOnWifiAndOpenApp,
TurnOffWifiAndTurnOnBluetooth, ContactsAddContact, SimpleSmsSend / SimpleSmsReply /
SimpleSmsSendReceivedAddress /
SimpleSmsReplyMostRecent / SimpleSmsResend (Simple SMS Messenger), ExpenseAddSingle / ExpenseAddMultiple /
ExpenseDeleteSingle / ExpenseDeleteMultiple / ExpenseDeleteDuplicates(2) (Pro Expense),
RecipeAddSingleRecipe / RecipeAddMultipleRecipes / RecipeAddMultipleRecipesFromMarkor(2) /
RecipeDeleteSingleRecipe / RecipeDeleteSingleWithRecipeWithNoise / RecipeDeleteMultipleRecipes /
RecipeDeleteMultipleRecipesWithNoise / RecipeDeleteDuplicateRecipes(2) (Broccoli),
MarkorCreateNote / MarkorCreateFolder / MarkorDeleteNote / MarkorDeleteAllNotes / MarkorMoveNote /
MarkorChangeNoteContent / MarkorAddNoteHeader / MarkorMergeNotes, FilesDeleteFile / FilesMoveFile,
SimpleCalendarAddOneEvent / SimpleCalendarLocationOfEvent / SimpleCalendarDeleteEvents /
SimpleCalendarDeleteEventsOnRelativeDay / SimpleCalendarDeleteOneEvent, the four other add-event tasks and
the eight question tasks of :mod:`.calendar_queries` (Simple Calendar Pro, all 18), and the six Tasks app
question tasks (:mod:`.tasks_app`), and ExpenseDeleteMultiple2 / ExpenseAddMultipleFromMarkor /
RecipeDeleteDuplicateRecipes3 / RecipeDeleteMultipleRecipesWithConstraint (:mod:`.sqlite_apps_hard`),
MarkorEditNote and MarkorCreateNoteAndSms (:mod:`.markor_more`), CameraTakePhoto / CameraTakeVideo /
SimpleDrawProCreateDrawing / AudioRecorderRecordAudioWithFileName (:mod:`.media_apps`),
ExpenseAddMultipleFromGallery / RecipeAddMultipleRecipesFromImage / SaveCopyOfReceiptTaskEval
(:mod:`.gallery_apps`). Every class
writes its ``reference()`` end state for the causation check (:mod:`guigym.envs.android.check`).
"""
from guigym.envs.android.androidworld import calendar, calendar_queries, files, messaging, sqlite_apps, system  # noqa: F401
from guigym.envs.android.androidworld import gallery_apps, markor_more, media_apps, sqlite_apps_hard, tasks_app  # noqa: F401
from guigym.envs.android.androidworld.base import TASKS, AndroidWorldTask, register
from guigym.envs.android.androidworld.metadata import TaskMetadata, load_task_metadata, metadata_table

__all__ = ["TASKS", "AndroidWorldTask", "register", "TaskMetadata", "load_task_metadata", "metadata_table"]
